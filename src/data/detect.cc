#include "data/detect.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "core/status.h"
#include "data/file.h"
#include "data/tfrecord.h"

namespace cohort::data {
namespace {

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

bool idx_magic(const uint8_t* p, size_t n) {
  return n >= 4 && p[0] == 0 && p[1] == 0 && p[2] == 0x08 && p[3] >= 1 && p[3] <= 4;
}

bool gzip_holds_idx(const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "rb");
  if (!gz) return false;
  uint8_t head[4] = {};
  int got = gzread(gz, head, sizeof head);
  gzclose(gz);
  return got == 4 && idx_magic(head, 4);
}

bool other_image_magic(const uint8_t* p, size_t n) {
  auto is = [&](std::string_view magic, size_t at = 0) {
    return n >= at + magic.size() && std::memcmp(p + at, magic.data(), magic.size()) == 0;
  };
  return is("\x89PNG") || is("GIF8") || is("BM") || (is("RIFF") && is("WEBP", 8)) || is("II*\0") || is("MM\0*");
}

bool looks_like_text(const uint8_t* p, size_t n) {
  size_t printable = 0;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] == 0) return false;
    if (std::isprint(p[i]) || p[i] == '\n' || p[i] == '\r' || p[i] == '\t' || p[i] >= 0x80) ++printable;
  }
  return n > 0 && printable * 10 >= n * 9;
}

// "'a', 'b', 'c' and 4 more"; entries of `described` are already quoted.
std::string name_list(const std::vector<std::string>& names, const std::string& suffix = "", bool described = false) {
  std::string out;
  const size_t shown = std::min<size_t>(names.size(), 3);
  for (size_t i = 0; i < shown; ++i)
    out += described ? cat(i ? ", " : "", names[i]) : cat(i ? ", " : "", "'", names[i], suffix, "'");
  if (names.size() > shown) out += cat(" and ", names.size() - shown, " more");
  return out;
}

// The sub-folder holds at least one image (by name, or a JPEG by content among the
// first few files). Stops at the first one: a class of ImageNet holds 1300.
bool holds_images(const std::string& dir) {
  int sniffed = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (has_image_extension(name)) return true;
    if (sniffed < 8 && is_regular_file(it->path().string())) {
      ++sniffed;
      if (sniff_content(it->path().string()) == Content::kJpeg) return true;
    }
  }
  if (ec) fail(Code::kIo, "cannot list directory '", dir, "': ", ec.message());
  return false;
}

// What a directory holds, by kind.
struct Found {
  std::vector<std::string> shards, idx, images, class_dirs, other_dirs, other_files;
};

Found survey(const std::string& path) {
  Found f;
  for (const auto& name : list_directory(path)) {
    std::string p = join_path(path, name);
    if (is_directory(p)) {
      (holds_images(p) ? f.class_dirs : f.other_dirs).push_back(name);
      continue;
    }
    if (!is_regular_file(p) || (name.size() > 4 && name.compare(name.size() - 4, 4, ".idx") == 0)) continue;
    if (has_image_extension(name)) {
      f.images.push_back(name);
      continue;
    }
    Content c = sniff_content(p);
    const bool split_name = named_by_split(name, "train") || named_by_split(name, "validation");
    if (c == Content::kTFRecord || (split_name && (c == Content::kEmpty || c == Content::kUnknown))) {
      // A shard named by its split whose first header is damaged is still a shard: opening
      // it reports the damage.
      f.shards.push_back(p);
    } else if (c == Content::kIdx) {
      f.idx.push_back(name);
    } else if (c == Content::kJpeg || c == Content::kOtherImage) {
      f.images.push_back(name);
    } else {
      f.other_files.push_back(cat("'", name, "' (", describe(c), ")"));
    }
  }
  return f;
}

Layout detect_file(const std::string& path) {
  Content c = sniff_content(path);
  if (c == Content::kTFRecord) return {"tfrecord", {path}, {}};
  if (c == Content::kIdx) return {"idx", {}, {}};
  if (c == Content::kJpeg || c == Content::kOtherImage)
    fail(Code::kInvalidArgument, "data_dir '", path, "' is ", describe_content(path),
         ", not a dataset: an image folder is a directory with one sub-folder per class holding the images "
         "(DIR/CLASS/IMAGE.jpg); point data_dir at that directory");
  fail(Code::kInvalidArgument, "data_dir '", path, "' is ", describe_content(path), ", not a dataset: expected ",
       expected_layouts(path));
}

}  // namespace

Content sniff_content(const std::string& path) {
  File file(path);
  std::array<uint8_t, 64> head{};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(file.size(), head.size()));
  if (n == 0) return Content::kEmpty;
  file.read_at(0, head.data(), n);
  if (starts_with_record(file)) return Content::kTFRecord;
  const uint8_t* p = head.data();
  if (idx_magic(p, n)) return Content::kIdx;
  if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return Content::kJpeg;
  if (n >= 2 && p[0] == 0x1F && p[1] == 0x8B) return gzip_holds_idx(path) ? Content::kIdx : Content::kGzip;
  if (other_image_magic(p, n)) return Content::kOtherImage;
  if (looks_like_text(p, n)) return Content::kText;
  return Content::kUnknown;
}

std::string describe_content(const std::string& path) { return describe(sniff_content(path)); }

std::string describe(Content content) {
  switch (content) {
    case Content::kEmpty:
      return "an empty file";
    case Content::kTFRecord:
      return "a TFRecord shard";
    case Content::kIdx:
      return "an MNIST IDX file";
    case Content::kJpeg:
      return "a JPEG image";
    case Content::kOtherImage:
      return "an image that is not a JPEG";
    case Content::kGzip:
      return "gzip data";
    case Content::kText:
      return "text";
    case Content::kUnknown:
      break;
  }
  return "data of no kind cohort reads";
}

bool has_image_extension(const std::string& name) {
  auto dot = name.find_last_of('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  static const char* const kImages[] = {"jpg", "jpeg", "jpe", "jfif", "png", "bmp", "gif", "webp", "tif", "tiff"};
  return std::any_of(std::begin(kImages), std::end(kImages), [&](const char* e) { return ext == e; });
}

std::vector<std::string> image_files(const std::string& dir, std::vector<std::string>* ignored) {
  std::vector<std::string> out;
  for (const auto& name : list_directory(dir)) {
    std::string p = join_path(dir, name);
    if (!is_regular_file(p)) continue;
    if (has_image_extension(name) || sniff_content(p) == Content::kJpeg) {
      out.push_back(p);
    } else if (ignored) {
      ignored->push_back(p);
    }
  }
  return out;
}

bool named_by_split(const std::string& name, const std::string& split) {
  return starts_with(name, split + "-") || starts_with(name, split + ".");
}

std::string expected_layouts(const std::string& path) {
  return cat("one of: TFRecord shards ('", path, "/train-*', 'validation-*', with or without DALI .idx files), ",
             "MNIST IDX files ('train-images-idx3-ubyte[.gz]' and 'train-labels-idx1-ubyte[.gz]', t10k-* for ",
             "validation), or an image folder (one sub-folder per class holding its images: '", path,
             "/CLASS/IMAGE.jpg'); or name the kind with data_source=tfrecord|idx|folder");
}

Layout detect_layout(const std::string& path) {
  if (!is_directory(path)) return detect_file(path);
  Found f = survey(path);
  const std::string where = cat("data_dir '", path, "'");
  auto both = [&](const std::string& a, const std::string& b, const char* hint) {
    fail(Code::kInvalidArgument, where, " holds both ", a, " and ", b, ": it is ambiguous which is the dataset (", hint,
         ")");
  };
  const std::string shards = cat("TFRecord shards (", name_list(f.shards), ")");
  const std::string class_dirs = cat("sub-folders with images (", name_list(f.class_dirs, "/"), ")");
  const std::string idx = cat("MNIST IDX files (", name_list(f.idx), ")");
  if (!f.shards.empty() && !f.class_dirs.empty())
    both(shards, class_dirs, "use data_source=tfrecord or data_source=folder, or move one of them out");
  if (!f.idx.empty() && !f.shards.empty())
    both(idx, shards, "use data_source=idx or data_source=tfrecord, or move one of them out");
  if (!f.idx.empty() && !f.class_dirs.empty())
    both(idx, class_dirs, "use data_source=idx or data_source=folder, or move one of them out");

  Layout out;
  if (!f.other_dirs.empty())
    out.notes.push_back(cat("ignoring sub-folders without images: ", name_list(f.other_dirs, "/")));
  if (!f.other_files.empty()) out.notes.push_back(cat("ignoring files: ", name_list(f.other_files, "", true)));
  if (!f.idx.empty()) {
    out.kind = "idx";
    return out;
  }
  if (!f.shards.empty()) {
    if (!f.images.empty()) out.notes.push_back(cat("ignoring images beside the shards: ", name_list(f.images)));
    out.kind = "tfrecord";
    out.shards = f.shards;
    return out;
  }
  if (!f.class_dirs.empty()) {
    if (!f.other_dirs.empty())
      fail(Code::kInvalidArgument, where, ": sub-folders ", name_list(f.other_dirs, "/"), " hold no images, beside ",
           class_dirs,
           ". In an image folder every sub-folder is a class: put images in one sub-folder per class and "
           "move the others out");
    if (!f.images.empty())
      fail(Code::kInvalidArgument, where, " holds images directly in it (", name_list(f.images), ") beside ",
           class_dirs, ": every image must be in the sub-folder of its class ('", path, "/CLASS/IMAGE.jpg')");
    out.kind = "folder";
    return out;
  }
  if (!f.images.empty())
    fail(Code::kInvalidArgument, where, " holds ", f.images.size(), " images (", name_list(f.images),
         ") but no class sub-folders: an image folder needs one sub-folder per class, which gives the labels ('", path,
         "/CLASS/IMAGE.jpg'); put images in one sub-folder per class (cohort-data pack then makes TFRecord "
         "shards of it)");
  std::string found;
  if (!f.other_files.empty()) found += cat(f.other_files.size(), " files (", name_list(f.other_files, "", true), ")");
  if (!f.other_dirs.empty())
    found += cat(found.empty() ? "" : " and ", f.other_dirs.size(), " sub-folders without images (",
                 name_list(f.other_dirs, "/"), ")");
  for (const auto& dir : f.other_dirs) {
    // An ImageNet-style tree (DIR/train/CLASS/IMAGE.jpg) is read one split at a time.
    std::string sub = join_path(path, dir);
    auto inner = list_directory(sub);
    if (std::any_of(inner.begin(), inner.end(), [&](const std::string& n) {
          return is_directory(join_path(sub, n)) && holds_images(join_path(sub, n));
        })) {
      found += cat("; '", dir, "/' holds class sub-folders with images: point data_dir at '", sub, "'");
      break;
    }
  }
  if (found.empty()) fail(Code::kInvalidArgument, where, " is empty: expected ", expected_layouts(path));
  fail(Code::kInvalidArgument, where, " holds no dataset cohort reads: found ", found, "; expected ",
       expected_layouts(path));
}

}  // namespace cohort::data

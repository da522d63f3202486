// AtomicFile: unpredictable temporary names, the user's umask, nothing left behind.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "core/files.h"
#include "core/status.h"
#include "support/temp_dir.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

// Sets the umask for one scope.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

TEST(AtomicFile, ReplacedFilesGetTheModeTheUmaskGivesANewFile) {
  TempDir dir;
  for (mode_t mask : {mode_t{022}, mode_t{077}, mode_t{002}, mode_t{027}}) {
    ScopedUmask scoped(mask);
    EXPECT_EQ(current_umask(), mask);
    const fs::path file = dir.path() / "f";
    replace_file_atomically(file, "x");
    EXPECT_EQ(mode_of(file), 0666 & ~mask) << "umask " << std::oct << mask;
  }
}

TEST(AtomicFile, TemporaryNamesAreUnpredictableAndNeverFollowAPlantedLink) {
  TempDir dir;
  const fs::path target = dir.path() / "data";
  const fs::path victim = dir.path() / "victim";
  { std::ofstream(victim) << "keep"; }
  // What an attacker could guess: the old name pattern with this process id.
  fs::create_symlink(victim, dir.path() / (".tmp-data-" + std::to_string(::getpid())));
  std::set<fs::path> temps;
  {
    AtomicFile a(target), b(target);
    temps = {a.temp_path(), b.temp_path()};
    EXPECT_EQ(temps.size(), 2u);
    for (const fs::path& t : temps) {
      EXPECT_TRUE(t.filename().string().starts_with(kTempFilePrefix)) << t;
      EXPECT_EQ(t.parent_path(), dir.path());
    }
    a.write("new", 3);
    a.commit();
  }
  EXPECT_EQ(read_text(target), "new");
  EXPECT_EQ(read_text(victim), "keep");
  for (const fs::path& t : temps) EXPECT_FALSE(fs::exists(t)) << t;
}

TEST(AtomicFile, AnUncommittedFileLeavesTheTargetAndNoTemporary) {
  TempDir dir;
  const fs::path target = dir.path() / "data";
  replace_file_atomically(target, "old");
  fs::path temp;
  {
    AtomicFile f(target);
    temp = f.temp_path();
    f.write("partial", 7);
  }
  EXPECT_EQ(read_text(target), "old");
  EXPECT_FALSE(fs::exists(temp));
}

TEST(AtomicFile, ErrorsNameTheTargetAndTheSystemError) {
  try {
    AtomicFile f("/nonexistent-dir/data");
    FAIL() << "created a file in a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/data"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort

#include "text.h"

#include <algorithm>

namespace cohortrun {

std::string shell_quote(std::string_view arg) {
  const bool safe = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("@%+=:,./_-^").find(c) != std::string_view::npos;
  });
  if (safe) return std::string(arg);
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += '\'';
  return out;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

std::vector<std::string> split_words(std::string_view text, std::string_view what) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'' || c == '"') {
      // Single quotes keep everything; double quotes let \" and \\ through escaped.
      size_t end = i + 1;
      std::string inner;
      while (end < text.size() && text[end] != c) {
        if (c == '"' && text[end] == '\\' && end + 1 < text.size() && (text[end + 1] == '"' || text[end + 1] == '\\'))
          ++end;
        inner += text[end++];
      }
      if (end >= text.size())
        throw UsageError(std::string(what) + ": unterminated " + (c == '\'' ? "single" : "double") + " quote in \"" +
                         std::string(text) + "\"");
      word += inner;
      in_word = true;
      i = end;
    } else if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
      in_word = true;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace cohortrun

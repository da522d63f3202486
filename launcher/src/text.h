// Small text helpers of cohortrun: shell quoting for --dry-run, word splitting for
// --mpi-args, and the usage error that ends cohortrun with exit status 2.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cohortrun {

// Bad input found before anything starts: cohortrun prints the message and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One argument quoted for a POSIX shell: left alone when it has only safe characters,
// else in single quotes ('it'\''s').
std::string shell_quote(std::string_view arg);

// A whole argument vector, quoted and joined by spaces, so it can be pasted into a shell.
std::string shell_join(const std::vector<std::string>& argv);

// Splits text into words as a shell would for quoting only: whitespace separates,
// '…' and "…" group, backslash escapes; nothing is expanded ($, `, ;, globs stay
// literal). Throws UsageError naming `what` for an unterminated quote.
std::vector<std::string> split_words(std::string_view text, std::string_view what);

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace cohortrun

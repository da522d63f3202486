// Host lists for cohortrun: `-H host:slots,…` and Open MPI hostfiles, parsed only far
// enough to reject malformed input early and to count the slots they give.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cohortrun {

struct Host {
  std::string name;
  int slots = 1;  // Open MPI's default for an entry without a slot count
};

// "h1:4,h2:4" or "h1,h2". Throws UsageError naming the bad entry.
std::vector<Host> parse_host_list(std::string_view list);

// An Open MPI hostfile: one host per line, optional `slots=N` / `max_slots=N`, '#'
// comments. Throws UsageError naming the file and line.
std::vector<Host> parse_hostfile_text(std::string_view text, std::string_view file);
std::vector<Host> read_hostfile(const std::string& file);

int total_slots(const std::vector<Host>& hosts);

}  // namespace cohortrun

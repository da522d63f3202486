// How kernels::for_each_list and reduce_list_into split a list of tensors across CUDA
// launches, and which elements each thread of a launch takes. Host code (the split) and
// COHORT_HD code (a block's share), so that CPU tests walk every block and thread of a
// launch exactly as the GPU runs them.
//
// A launch carries up to `capacity` items in its kernel parameters; item k of a launch
// owns blocks [first_block[k], first_block[k + 1]) and loops over its elements with
// the stride of those blocks. A block finds its item by binary search in first_block.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/hd.h"

namespace cohort::kernels {

// Kernel parameters of one list launch, in bytes: under the 4 KiB every CUDA version takes.
inline constexpr size_t kListParamBytes = 4000;
// The most blocks one item gets: a large tensor loops, a small one gets what it needs.
inline constexpr int64_t kMaxBlocksPerItem = 1024;

// Items per launch when each carries item_bytes of parameters (plus its first block).
constexpr int list_capacity(size_t item_bytes) {
  return static_cast<int>((kListParamBytes - 2 * sizeof(unsigned)) / (item_bytes + sizeof(unsigned)));
}

// One launch: the list's indices of its items and where each item's blocks begin
// (first_block has one entry more, the launch's block count).
struct ListLaunchPlan {
  std::vector<size_t> items;
  std::vector<unsigned> first_block;
};

// The launches for items of n[i] elements (empty items are left out), in list order.
inline std::vector<ListLaunchPlan> plan_list_launches(const std::vector<int64_t>& n, int capacity,
                                                      unsigned threads_per_block) {
  std::vector<ListLaunchPlan> out;
  for (size_t i = 0; i < n.size(); ++i) {
    if (n[i] <= 0) continue;
    if (out.empty() || static_cast<int>(out.back().items.size()) == capacity) out.push_back({{}, {0}});
    ListLaunchPlan& l = out.back();
    const int64_t blocks = std::min<int64_t>((n[i] + threads_per_block - 1) / threads_per_block, kMaxBlocksPerItem);
    l.items.push_back(i);
    l.first_block.push_back(l.first_block.back() + static_cast<unsigned>(blocks));
  }
  return out;
}

// What one thread of a list launch takes: elements first, first + stride, ... of item.
struct ListShare {
  int item;
  int64_t first, stride;
};

COHORT_HD ListShare list_share(const unsigned* first_block, int count, unsigned block, unsigned threads_per_block,
                               unsigned thread) {
  int lo = 0, hi = count;  // first_block[lo] <= block < first_block[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first_block[mid] <= block)
      lo = mid;
    else
      hi = mid;
  }
  const int64_t per = threads_per_block;
  return {lo, static_cast<int64_t>(block - first_block[lo]) * per + thread,
          static_cast<int64_t>(first_block[lo + 1] - first_block[lo]) * per};
}

}  // namespace cohort::kernels

// The MPI transport on real ranks (run under mpirun, on one host or several): ranks reduce
// through the shared segment when every node runs as many ranks (hierarchically when
// there are several nodes), results agree with the plain MPI_Allreduce path for every
// dtype and op, several buffers in one call and buffers of many pieces, and the
// negotiation's AND of words takes either path.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_transport.h"
#include "support/tensor_values.h"
#include "tensor/tensor.h"

namespace cohort::comm {
namespace {

using kernels::Reduce;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Small integers stored in dtype t: every op's result is exact in every dtype.
Tensor filled(DType t, size_t count, int rank) {
  Tensor b = Tensor::empty({static_cast<int64_t>(count)}, t);
  for (size_t i = 0; i < count; ++i)
    test::set(b, static_cast<int64_t>(i), static_cast<double>((static_cast<size_t>(rank) * 5 + i) % 3 + 1));
  return b;
}

// How many ranks run on this rank's node, and whether every node runs as many.
struct NodeLayout {
  int ranks_here = 0;
  bool even = false;
};

NodeLayout node_layout() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &node);
  NodeLayout l;
  MPI_Comm_size(node, &l.ranks_here);
  MPI_Comm_free(&node);
  int lo = 0, hi = 0;
  MPI_Allreduce(&l.ranks_here, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&l.ranks_here, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  l.even = lo == hi;
  return l;
}

TEST(MpiTransport, TheSharedSegmentIsUsedWhenEveryNodeRunsAsManyRanks) {
  MpiTransport shm(MPI_COMM_WORLD, 1 << 20, 1, 4096);
  MpiTransport plain(MPI_COMM_WORLD, 1 << 20, 1, 0);
  NodeLayout l = node_layout();
  const bool want = l.even && l.ranks_here > 1;
  EXPECT_EQ(shm.uses_shm(), want);
  EXPECT_EQ(shm.hierarchical(), want && l.ranks_here < world_size());
  EXPECT_FALSE(plain.uses_shm());
  EXPECT_FALSE(plain.hierarchical());
  if (world_rank() == 0)  // read by the multi-host test
    std::printf("transport: %d ranks, %d on node 0, shared segment %d, hierarchical %d\n", world_size(), l.ranks_here,
                shm.uses_shm() ? 1 : 0, shm.hierarchical() ? 1 : 0);
}

TEST(MpiTransport, SharedSegmentAgreesWithMpiAllreduceForEveryDtypeAndOp) {
  const int rank = world_rank();
  // 1 KiB pieces: the large count runs through dozens of pieces; 7 and 1 do not fill a line.
  MpiTransport shm(MPI_COMM_WORLD, 1 << 20, 1, 1024);
  MpiTransport plain(MPI_COMM_WORLD, 4096, 2, 0);  // MPI path, cut into pieces, window 2
  for (DType t : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8}) {
    for (Reduce op : {Reduce::kSum, Reduce::kMin, Reduce::kMax, Reduce::kProd}) {
      std::vector<size_t> counts = {7, 1, 0, 20011};
      std::vector<Tensor> a, b;
      std::vector<std::pair<void*, size_t>> abufs, bbufs;
      for (size_t c : counts) {
        a.push_back(filled(t, c, rank));
        b.push_back(filled(t, c, rank));
      }
      for (size_t i = 0; i < counts.size(); ++i) {
        abufs.emplace_back(a[i].data(), counts[i]);
        bbufs.emplace_back(b[i].data(), counts[i]);
      }
      shm.allreduce_many(abufs, t, op);
      plain.allreduce_many(bbufs, t, op);
      for (size_t i = 0; i < counts.size(); ++i)
        EXPECT_TRUE(counts[i] == 0 || std::memcmp(a[i].data(), b[i].data(), a[i].nbytes()) == 0)
            << dtype_name(t) << " op " << static_cast<int>(op) << " buffer of " << counts[i];
    }
  }
}

TEST(MpiTransport, AndWordsOnBothPaths) {
  const int rank = world_rank(), size = world_size();
  for (size_t slot : {size_t{4096}, size_t{0}}) {
    MpiTransport t(MPI_COMM_WORLD, 1 << 20, 1, slot);
    for (int step = 0; step < 50; ++step) {
      std::vector<uint64_t> words = {~(uint64_t{1} << rank), uint64_t{1} << (step % 64), ~uint64_t{0}};
      t.and_words(words);
      uint64_t expect = ~uint64_t{0};
      for (int q = 0; q < size; ++q) expect &= ~(uint64_t{1} << q);
      EXPECT_EQ(words[0], expect) << "slot " << slot;
      EXPECT_EQ(words[1], uint64_t{1} << (step % 64));
      EXPECT_EQ(words[2], ~uint64_t{0});
    }
    // More words than a slot holds go over MPI.
    std::vector<uint64_t> many(slot ? slot / 8 + 1 : 3, ~uint64_t{0});
    many.back() = rank == 0 ? 0 : ~uint64_t{0};
    t.and_words(many);
    EXPECT_EQ(many.back(), 0u);
    EXPECT_EQ(many.front(), ~uint64_t{0});
  }
}

TEST(MpiTransport, PointToPointMessagesGoRoundTheRingAndToOneself) {
  const int rank = world_rank(), size = world_size();
  MpiTransport t(MPI_COMM_WORLD, 1 << 20);
  EXPECT_TRUE(t.supports_p2p());
  EXPECT_GE(t.max_tag(), 32767);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  // A small message (sent eagerly) and one of 4 MiB (rendezvous), to the next rank and
  // to this one.
  for (size_t count : {size_t{3}, size_t{1} << 20}) {
    std::vector<int32_t> out(count), in(count, -1), self_out(count), self_in(count, -1);
    for (size_t i = 0; i < count; ++i) {
      out[i] = static_cast<int32_t>(rank * 1000 + i % 997);
      self_out[i] = -out[i];
    }
    const size_t bytes = count * sizeof(int32_t);
    std::vector<uint64_t> handles = {
        t.post_recv(prev, 5, in.data(), bytes), t.post_recv(rank, 6, self_in.data(), bytes),
        t.post_send(next, 5, out.data(), bytes), t.post_send(rank, 6, self_out.data(), bytes)};
    std::vector<size_t> got(handles.size(), 0);
    for (size_t h = 0; h < handles.size(); ++h)
      while (!t.test(handles[h], &got[h])) std::this_thread::yield();  // more ranks than cores: let them run
    EXPECT_EQ(got[0], bytes);
    EXPECT_EQ(got[1], bytes);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(in[i], static_cast<int32_t>(prev * 1000 + i % 997)) << i;
      ASSERT_EQ(self_in[i], -out[i]) << i;
    }
  }
  // A message longer than its receive fails that receive with kMismatch, and a receive
  // nobody sends to can be withdrawn.
  int64_t two[2] = {1, 2}, one = 0;
  const uint64_t r = t.post_recv(prev, 7, &one, sizeof one);
  const uint64_t s = t.post_send(next, 7, two, sizeof two);
  try {
    while (!t.test(r, nullptr)) std::this_thread::yield();
    ADD_FAILURE() << "a truncated message was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kMismatch) << e.what();
  }
  while (!t.test(s, nullptr)) std::this_thread::yield();
  t.cancel(t.post_recv(prev, 8, &one, sizeof one));
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace cohort::comm

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

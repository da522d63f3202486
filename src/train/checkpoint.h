// Checkpoints: one versioned binary file holding a model's parameters, the optimizer
// state, the training position, the RNG state and the input pipeline's position, with a
// CRC32C over the content. Files are written atomically (a temporary file in the same
// directory, fsync, rename, fsync of the directory), so a crash mid-write leaves the
// previous checkpoint and the "latest" pointer intact. Reading validates everything and
// names the file and what is wrong.
//
// Layout (little-endian): a 32-byte header — magic "COHORTCK", u32 version, u32 header
// size, u64 payload size, u32 CRC32C of the payload, u32 CRC32C of the header's first
// 28 bytes — then the payload: model name; i64 epoch, step, pipeline epoch, pipeline
// step; u64 seed, RNG counter; u32 count of (key, value) metadata strings; u32 count of
// parameter tensors; u32 count of optimizer-state tensors. A string is u32 length +
// bytes; a tensor is name, u8 dtype, u32 ndim, i64 dims[ndim], u64 byte count, bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "optim/named_tensor.h"
#include "optim/optimizer.h"

namespace cohort {

inline constexpr uint32_t kCheckpointVersion = 1;

struct Checkpoint {
  std::string model;
  int64_t epoch = 0;           // completed epochs
  int64_t step = 0;            // optimizer steps taken
  int64_t pipeline_epoch = 0;  // where the input pipeline resumes
  int64_t pipeline_step = 0;
  uint64_t seed = 0;                            // the run's seed ...
  uint64_t rng_counter = 0;                     // ... and how far counter-based streams have advanced
  std::map<std::string, std::string> metadata;  // e.g. "optimizer" → "momentum"
  std::vector<NamedTensor> params;
  std::vector<NamedTensor> optimizer_state;
};

struct CheckpointWriteOptions {
  // Called after each chunk (at most 1 MiB) reaches the temporary file, with the bytes
  // written so far; lets tests interrupt a write part-way.
  std::function<void(uint64_t bytes_written)> on_progress;
};

// Writes `ck` to `file` atomically. Tensors must be contiguous host tensors with unique
// names. Throws kIo naming the file and the system error; the previous content of
// `file`, if any, is untouched on failure.
void write_checkpoint(const std::filesystem::path& file, const Checkpoint& ck,
                      const CheckpointWriteOptions& options = {});

// Reads and validates a checkpoint. Throws kIo (cannot open/read) or kCorruptData
// naming the file and the problem: not a checkpoint (bad magic), an unsupported
// version, truncated (expected vs actual size), checksum mismatch, malformed content.
Checkpoint read_checkpoint(const std::filesystem::path& file);

// The same validation over a checkpoint's bytes; `file` only names it in errors.
Checkpoint parse_checkpoint(std::string_view bytes, const std::filesystem::path& file);

// Checks that a checkpoint belongs to this model: the same model name and exactly the
// same parameter names, dtypes and shapes. Throws kInvalidArgument naming `file`
// and the first difference.
void check_checkpoint_matches(const Checkpoint& ck, std::string_view model, std::span<const NamedTensor> params,
                              const std::filesystem::path& file);

// check_checkpoint_matches, then copies the checkpoint's parameter values into `params`.
void restore_parameters(const Checkpoint& ck, std::string_view model, std::span<const NamedTensor> params,
                        const std::filesystem::path& file);

// Puts the optimizer's state (copied) and kind ("optimizer" metadata) into `ck`.
void store_optimizer_state(Checkpoint& ck, const Optimizer& optimizer);

// Loads the optimizer state saved by store_optimizer_state(). Throws kInvalidArgument
// naming `file` when it was saved by another kind of optimizer or does not fit.
void restore_optimizer_state(const Checkpoint& ck, Optimizer& optimizer, const std::filesystem::path& file);

// A checkpoint directory: files "ckpt-<step>.cohort" and a "latest" file naming the
// newest one, each replaced atomically. Only one process (rank 0) writes to it.
class CheckpointDir {
 public:
  explicit CheckpointDir(std::filesystem::path dir, int keep = 2);

  // Writes the checkpoint, then points "latest" at it, then deletes checkpoints beyond
  // the newest `keep` and temporary files left by an interrupted write. Returns the path.
  std::filesystem::path save(const Checkpoint& ck, const CheckpointWriteOptions& options = {});

  // The file "latest" names, or nullopt when there is no "latest" yet. Throws
  // kCorruptData when "latest" is malformed or names a file that does not exist.
  std::optional<std::filesystem::path> latest() const;

  // Reads the checkpoint "latest" names; throws kIo when there is none.
  Checkpoint load_latest() const;

  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  int keep_;
};

}  // namespace cohort

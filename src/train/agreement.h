// Agreement on an outcome that only one rank knows: the root tries something alone
// (writing or reading a checkpoint), then every rank learns whether it worked, so a
// failure on the root fails every rank alike instead of leaving the others waiting in
// their next collective. The root's code and message travel in one broadcast of a
// fixed header and one of the message bytes.
#pragma once

#include <exception>
#include <new>
#include <optional>
#include <string>

#include "core/status.h"
#include "optim/distributed_optimizer.h"

namespace cohort::train {

// Collective: `root` passes its error (or nullopt when it succeeded); every rank passes
// what it has (ignored). When the root failed, every rank throws an Error with the
// root's code and the same text, "rank <root> could not <what>: <root's message>".
// `name` names the broadcasts (unique among the caller's collectives).
void agree_with_root(Collectives& comm, const std::string& name, int root, const std::optional<Error>& root_error,
                     const std::string& what);

// Runs `work` on `root` only, then agree_with_root() on its outcome.
template <typename Work>
void run_on_root_and_agree(Collectives& comm, const std::string& name, int root, const std::string& what, Work&& work) {
  std::optional<Error> error;
  if (comm.rank() == root) {
    try {
      work();
    } catch (const Error& e) {
      error = e;
    } catch (const std::bad_alloc&) {
      error = Error(Code::kOutOfMemory, "out of memory");
    } catch (const std::exception& e) {
      error = Error(Code::kInternal, cat("internal error: ", e.what()));
    }
  }
  agree_with_root(comm, name, root, error, what);
}

}  // namespace cohort::train

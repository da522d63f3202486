#include "train/agreement.h"

#include <cstring>

namespace cohort::train {
namespace {

// What the root tells every rank first: its outcome and the length of its message.
struct OutcomeHeader {
  Code code = Code::kOk;
  int64_t message_bytes = 0;

  Tensor pack() const {
    Tensor t = Tensor::empty({2}, DType::kI64);
    t.data_as<int64_t>()[0] = static_cast<int64_t>(code);
    t.data_as<int64_t>()[1] = message_bytes;
    return t;
  }
  static OutcomeHeader unpack(const Tensor& t) {
    return {static_cast<Code>(t.data_as<int64_t>()[0]), t.data_as<int64_t>()[1]};
  }
};

}  // namespace

void agree_with_root(Collectives& comm, const std::string& name, int root, const std::optional<Error>& root_error,
                     const std::string& what) {
  const bool is_root = comm.rank() == root;
  OutcomeHeader mine;
  std::string message;
  if (is_root && root_error) {
    // A failure without a code of its own still fails every rank.
    mine.code = root_error->code() == Code::kOk ? Code::kInternal : root_error->code();
    message = cat("rank ", root, " could not ", what, ": ", root_error->what());
    mine.message_bytes = static_cast<int64_t>(message.size());
  }
  Tensor header = mine.pack();
  comm.broadcast(name + "/outcome", header, root);
  const OutcomeHeader agreed = OutcomeHeader::unpack(header);
  if (agreed.code == Code::kOk) return;
  Tensor text = Tensor::empty({agreed.message_bytes}, DType::kU8);
  if (is_root) std::memcpy(text.data(), message.data(), message.size());
  comm.broadcast(name + "/message", text, root);
  throw Error(agreed.code, std::string(text.data_as<char>(), static_cast<size_t>(agreed.message_bytes)));
}

}  // namespace cohort::train

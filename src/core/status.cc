#include "core/status.h"

namespace cohort {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kInvalidState:
      return "invalid state";
    case Code::kUnsupported:
      return "unsupported";
    case Code::kMismatch:
      return "mismatch between ranks";
    case Code::kStalled:
      return "stalled";
    case Code::kCancelled:
      return "cancelled";
    case Code::kEndOfData:
      return "end of data";
    case Code::kPeerShutdown:
      return "peer shut down";
    case Code::kOutOfMemory:
      return "out of memory";
    case Code::kIo:
      return "I/O error";
    case Code::kCorruptData:
      return "corrupt data";
    case Code::kInternal:
      return "internal error";
    case Code::kMpi:
      return "MPI error";
    case Code::kPeerLost:
      return "peer lost";
    case Code::kCuda:
      return "CUDA error";
    case Code::kNccl:
      return "NCCL error";
    case Code::kCudnn:
      return "cuDNN error";
    case Code::kCublas:
      return "cuBLAS error";
    case Code::kJpeg:
      return "JPEG error";
    case Code::kDnnl:
      return "oneDNN error";
  }
  return "unknown status";
}

}  // namespace cohort

// Convolution (cuDNN: cudnnConvolutionForward, BackwardData and BackwardFilter,
// algorithms found by cudnnFind once per shape; f16 and bf16 on tensor cores with f32
// accumulation) and dense layers (cublasGemmEx on the row-major tensors read as
// column-major ones). The f32 master weights are read directly by an f32 NCHW
// convolution or f32 dense layer; any other reads a copy in its type (and, NHWC, in
// cuDNN's KRSC order) refreshed at the start of each forward, all layers' copies of a
// type in one list launch (CudaPlan::copy_weights), and its weight gradient is turned back
// into the f32 OIHW one. Biases are added by kernels::AddBias; their gradients are
// sums over the batch as matrix products with a vector of ones (cuDNN's
// BackwardBias for f32 NCHW).
#include "backend/cuda/plan.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"

namespace cohort::backend::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

struct Operand {
  const void* data;
  DType dtype;
  int ld;
};

// C (m × n, column-major) = A·B + beta·C with f32 accumulation (TF32 tensor cores for
// f32 operands when the policy allows them, unless `exact`).
void gemm(Context& ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, Operand a, Operand b,
          const float* beta, void* c, DType ct, int ldc, bool exact, const char* what) {
  const bool all_f32 = a.dtype == DType::kF32 && b.dtype == DType::kF32 && ct == DType::kF32;
  const cublasComputeType_t compute = exact                 ? CUBLAS_COMPUTE_32F_PEDANTIC
                                      : all_f32 && ctx.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                            : CUBLAS_COMPUTE_32F;
  check(cublasGemmEx(ctx.cublas, ta, tb, m, n, k, &kOne, a.data, cuda_type(a.dtype), a.ld, b.data, cuda_type(b.dtype),
                     b.ld, beta, c, cuda_type(ct), ldc, compute, CUBLAS_GEMM_DEFAULT),
        what);
}

// The first algorithm of a cuDNN search whose workspace fits, by the search's order
// (fastest first for cudnnFind, best first for the heuristics). A search may list an
// algorithm in another math type than the descriptor's: with fma_only (f32 with TF32
// off) only CUDNN_FMA_MATH ones count, or the search would turn TF32 back on.
template <typename Perf>
bool pick(const Perf* perf, int count, size_t limit, bool fma_only, ConvChoice& out) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit &&
        (!fma_only || perf[i].mathType == CUDNN_FMA_MATH)) {
      out = {static_cast<int>(perf[i].algo), static_cast<int>(perf[i].mathType), perf[i].memory, perf[i].time};
      return true;
    }
  return false;
}

class ConvLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    const Shape& is = in().sample;
    const int k = spec_.out_channels, c = static_cast<int>(is[0]), g = spec_.groups;
    const Window& w = spec_.win;
    const DType t = dtype();
    check(cudnnSetFilter4dDescriptor(filter_, cudnn_type(t), nhwc() ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, k, c / g,
                                     w.kh, w.kw),
          "cudnnSetFilter4dDescriptor");
    const cudnnMathType_t math = t != DType::kF32 ? CUDNN_TENSOR_OP_MATH
                                 : ctx().tf32     ? CUDNN_DEFAULT_MATH
                                                  : CUDNN_FMA_MATH;
    for (ConvDesc* d : {&fwd_desc_, &data_desc_, &filter_desc_}) {
      // f32 accumulation whatever the values' type
      check(cudnnSetConvolution2dDescriptor(*d, w.ph, w.pw, w.sh, w.sw, w.dh, w.dw, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            "cudnnSetConvolution2dDescriptor");
      check(cudnnSetConvolutionGroupCount(*d, g), "cudnnSetConvolutionGroupCount");
      check(cudnnSetConvolutionMathType(*d, math), "cudnnSetConvolutionMathType");
    }
    int dims[4];
    check(cudnnGetConvolutionNdForwardOutputDim(fwd_desc_, in().td, filter_, 4, dims),
          "cudnnGetConvolutionNdForwardOutputDim");
    for (int i = 0; i < 4; ++i)
      require(dims[i] == out().desc.dims[static_cast<size_t>(i)], "layer '", spec_.name,
              "': cuDNN computes another output size than the network's");
    alloc_out();
    weight_count_ = static_cast<int64_t>(k) * (c / g) * w.kh * w.kw;
    copied_ = t != DType::kF32 || nhwc();
    if (copied_) {
      weights_ = plan_.alloc({weight_count_}, t);
      if (training()) weight_grad_ = plan_.alloc({weight_count_}, t);
    }
    fwd_ = choose(ConvPass::kForward, fwd_desc_);
    with_type(t, [&]<typename S, typename C>() {
      if (copied_) plan_.copy_weights<S, C>(index_, weight_count_, from_oihw<S, C>(), weights_.data_as<S>(), master());
      fwd.push_back({[this] {
        check(cudnnConvolutionForward(ctx().cudnn, &kOne, in().td, in().x(), filter_, weights(), fwd_desc_,
                                      static_cast<cudnnConvolutionFwdAlgo_t>(fwd_.algo), plan_.workspace(),
                                      plan_.workspace_bytes(), &kZero, out().td, out().x()),
              "cudnnConvolutionForward");
        if (spec_.bias) {
          const int64_t hw = nhwc() ? 0 : static_cast<int64_t>(out().desc.dims[2]) * out().desc.dims[3];
          kernels::for_each(cstream(), out().numel(), kernels::AddBias<S, C>{spec_.out_channels, hw}, out().xs<S>(),
                            static_cast<const float*>(plan_.param(spec_.params[1])));
        }
      }});
    });
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    filter_pass_ = choose(ConvPass::kBackwardFilter, filter_desc_);
    if (spec_.bias) {
      if (nhwc())
        plan_.ones(dtype(), out().numel() / spec_.out_channels);
      else
        bias_ = tensor_desc(Desc4{{1, spec_.out_channels, 1, 1}, {spec_.out_channels, 1, 1, 1}});
    }
    with_type(dtype(), [&]<typename S, typename C>() {
      bwd.push_back({[this] {
        check(cudnnConvolutionBackwardFilter(ctx().cudnn, &kOne, in().td, in().x(), out().td, out().dx(), filter_desc_,
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(filter_pass_.algo),
                                             plan_.workspace(), plan_.workspace_bytes(), &kZero, filter_,
                                             copied_ ? weight_grad_.data() : plan_.grad(spec_.params[0])),
              "cudnnConvolutionBackwardFilter");
        if (copied_) {
          const kernels::WeightsFromOihw<S, C> to = from_oihw<S, C>();
          const kernels::GradToOihw<S, C> f{to.k, to.c, to.rs, to.ohwi};
          kernels::for_each(cstream(), weight_count_, f, plan_.grad(spec_.params[0]),
                            static_cast<const S*>(weight_grad_.data_as<S>()));
        }
        if (spec_.bias) bias_grad();
      }});
    });
    plan_.ready(bwd, spec_.params);
    if (in().needs_grad) {
      data_pass_ = choose(ConvPass::kBackwardData, data_desc_);
      const bool acc = plan_.grad_write(bwd, in());
      bwd.push_back({[this, acc] {
        check(
            cudnnConvolutionBackwardData(ctx().cudnn, &kOne, filter_, weights(), out().td, out().dx(), data_desc_,
                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(data_pass_.algo), plan_.workspace(),
                                         plan_.workspace_bytes(), beta_for(acc), in().td, in().dx()),
            "cudnnConvolutionBackwardData");
      }});
    }
    plan_.grad_done(bwd, out());
  }

 private:
  // The algorithm of one pass: from the backend's cache, or searched once (cudnnFind,
  // then the heuristics if the search cannot run), with its math type set on `desc`.
  ConvChoice choose(ConvPass pass, ConvDesc& desc) {
    ConvKey key;
    key.pass = pass;
    key.input = in().dims();
    key.output = out().dims();
    key.filter = {spec_.out_channels, in().sample[0] / spec_.groups, spec_.win.kh, spec_.win.kw};
    key.win = spec_.win;
    key.groups = spec_.groups;
    key.dtype = std::string(dtype_name(dtype()));
    key.layout = nhwc() ? Layout::kNHWC : Layout::kNCHW;
    key.tf32 = ctx().tf32 && dtype() == DType::kF32;
    const ConvChoice c = ctx().algos.find(key, [&] { return search(pass, desc); });
    check(cudnnSetConvolutionMathType(desc, static_cast<cudnnMathType_t>(c.math_type)), "cudnnSetConvolutionMathType");
    plan_.need_workspace(c.workspace);
    return c;
  }

  ConvChoice search(ConvPass pass, ConvDesc& desc) {
    cudnnHandle_t h = ctx().cudnn;
    const size_t limit = ctx().workspace_limit;
    const bool fma_only = dtype() == DType::kF32 && !ctx().tf32;
    ConvChoice c;
    int n = 0;
    switch (pass) {
      case ConvPass::kForward: {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        if (cudnnFindConvolutionForwardAlgorithm(h, in().td, filter_, desc, out().td, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                 &n, perf) == CUDNN_STATUS_SUCCESS &&
            pick(perf, n, limit, fma_only, c))
          return c;
        check(cudnnGetConvolutionForwardAlgorithm_v7(h, in().td, filter_, desc, out().td,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf),
              "cudnnGetConvolutionForwardAlgorithm_v7");
        if (pick(perf, n, limit, fma_only, c)) return c;
        break;
      }
      case ConvPass::kBackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (cudnnFindConvolutionBackwardDataAlgorithm(h, filter_, out().td, desc, in().td,
                                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n,
                                                      perf) == CUDNN_STATUS_SUCCESS &&
            pick(perf, n, limit, fma_only, c))
          return c;
        check(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, filter_, out().td, desc, in().td,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
              "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        if (pick(perf, n, limit, fma_only, c)) return c;
        break;
      }
      case ConvPass::kBackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (cudnnFindConvolutionBackwardFilterAlgorithm(h, in().td, out().td, desc, filter_,
                                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
                                                        perf) == CUDNN_STATUS_SUCCESS &&
            pick(perf, n, limit, fma_only, c))
          return c;
        check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, in().td, out().td, desc, filter_,
                                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        if (pick(perf, n, limit, fma_only, c)) return c;
        break;
      }
    }
    fail(Code::kCudnn, "layer '", spec_.name, "': cuDNN has no convolution algorithm for ", shape_string(in().dims()),
         " (", dtype_name(dtype()), nhwc() ? ", NHWC" : ", NCHW", fma_only ? ", FMA math: tf32=off" : "",
         ") within a workspace of ", limit >> 20, " MiB");
  }

  template <typename S, typename C>
  kernels::WeightsFromOihw<S, C> from_oihw() const {
    const int64_t c = in().sample[0] / spec_.groups;
    return {spec_.out_channels, c, static_cast<int64_t>(spec_.win.kh) * spec_.win.kw, nhwc()};
  }
  const float* master() const { return plan_.param(spec_.params[0]); }
  const void* weights() const { return copied_ ? weights_.data() : master(); }

  // db[k] = Σ dy over the batch and the pixels of channel k.
  void bias_grad() {
    float* db = plan_.grad(spec_.params[1]);
    if (!nhwc()) {  // f32 NCHW (reduced precision is always NHWC)
      check(cudnnConvolutionBackwardBias(ctx().cudnn, &kOne, out().td, out().dx(), &kZero, bias_, db),
            "cudnnConvolutionBackwardBias");
      return;
    }
    // NHWC: dy is a column-major [K × N·H·W] matrix; db = dy · ones.
    const int k = spec_.out_channels, rows = static_cast<int>(out().numel() / k);
    gemm(ctx(), CUBLAS_OP_N, CUBLAS_OP_N, k, 1, rows, {out().dx(), dtype(), k},
         {plan_.ones(dtype(), rows), dtype(), rows}, &kZero, db, DType::kF32, k, true,
         "cublasGemmEx (convolution bias gradient)");
  }

  FilterDesc filter_;
  ConvDesc fwd_desc_, data_desc_, filter_desc_;
  TensorDesc bias_;  // f32 [1, K, 1, 1] (cuDNN's bias gradient)
  ConvChoice fwd_, data_pass_, filter_pass_;
  int64_t weight_count_ = 0;
  bool copied_ = false;           // reads a copy of the master weights
  Tensor weights_, weight_grad_;  // that copy and its gradient (the layer's type and order)
};

// y[N, O] = x[N, I] · Wᵀ + b with W [O, I] row-major: in cuBLAS's column-major terms
// Yᵀ = op_T(W) · Xᵀ, where each row-major matrix is read as its transpose. The weight
// gradient is computed straight into the f32 one (f16/bf16 operands, f32 result).
class DenseLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    n_ = static_cast<int>(plan_.opt_.batch);
    i_ = static_cast<int>(in().numel() / n_);
    o_ = spec_.out_channels;
    alloc_out();
    if (dtype() != DType::kF32) weights_ = plan_.alloc({static_cast<int64_t>(o_) * i_}, dtype());
    with_type(dtype(), [&]<typename S, typename C>() {
      if (weights_.defined())
        plan_.copy_weights<S, C>(index_, weights_.numel(), kernels::WeightsFromOihw<S, C>{o_, i_, 1, false},
                                 weights_.data_as<S>(), static_cast<const float*>(plan_.param(spec_.params[0])));
      fwd.push_back({[this] {
        gemm(ctx(), CUBLAS_OP_T, CUBLAS_OP_N, o_, n_, i_, {weights(), dtype(), i_}, {in().x(), dtype(), i_}, &kZero,
             out().x(), dtype(), o_, false, "cublasGemmEx (dense forward)");
        if (spec_.bias)
          kernels::for_each(cstream(), out().numel(), kernels::AddBias<S, C>{o_, 1}, out().xs<S>(),
                            static_cast<const float*>(plan_.param(spec_.params[1])));
      }});
    });
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (spec_.bias) plan_.ones(dtype(), n_);
    bwd.push_back({[this] {
      // dW (column-major I × O) = Xᵀ · dY
      gemm(ctx(), CUBLAS_OP_N, CUBLAS_OP_T, i_, o_, n_, {in().x(), dtype(), i_}, {out().dx(), dtype(), o_}, &kZero,
           plan_.grad(spec_.params[0]), DType::kF32, i_, false, "cublasGemmEx (dense weight gradient)");
      // db (O) = dY (column-major O × N) · ones
      if (spec_.bias)
        gemm(ctx(), CUBLAS_OP_N, CUBLAS_OP_N, o_, 1, n_, {out().dx(), dtype(), o_},
             {plan_.ones(dtype(), n_), dtype(), n_}, &kZero, plan_.grad(spec_.params[1]), DType::kF32, o_, true,
             "cublasGemmEx (dense bias gradient)");
    }});
    plan_.ready(bwd, spec_.params);
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      bwd.push_back({[this, acc] {
        // dXᵀ (I × N) = W (read as I × O) · dYᵀ
        gemm(ctx(), CUBLAS_OP_N, CUBLAS_OP_N, i_, n_, o_, {weights(), dtype(), i_}, {out().dx(), dtype(), o_},
             beta_for(acc), in().dx(), dtype(), i_, false, "cublasGemmEx (dense input gradient)");
      }});
    }
    plan_.grad_done(bwd, out());
  }

 private:
  const void* weights() const {
    return dtype() == DType::kF32 ? static_cast<const void*>(plan_.param(spec_.params[0])) : weights_.data();
  }
  int n_ = 0, i_ = 0, o_ = 0;
  Tensor weights_;  // the weights in a reduced type, refreshed each forward
};

}  // namespace

std::unique_ptr<CudaLayer> make_conv_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<ConvLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_dense_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<DenseLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda

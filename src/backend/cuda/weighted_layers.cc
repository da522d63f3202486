// Convolution (cuDNN: cudnnConvolutionForward, BackwardData, BackwardFilter and
// BackwardBias, algorithms found by cudnnFind once per shape) and dense layers (cuBLAS
// SGEMM on the row-major tensors read as column-major ones).
#include "backend/cuda/plan.h"

namespace cohort::backend::cuda {
namespace {

// The first algorithm of a cuDNN search whose workspace fits, by the search's order
// (fastest first for cudnnFind, best first for the heuristics).
template <typename Perf>
bool pick(const Perf* perf, int count, size_t limit, ConvChoice& out) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit) {
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
    check(cudnnSetFilter4dDescriptor(filter_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c / g, w.kh, w.kw),
          "cudnnSetFilter4dDescriptor");
    for (ConvDesc* d : {&fwd_desc_, &data_desc_, &filter_desc_}) {
      check(cudnnSetConvolution2dDescriptor(*d, w.ph, w.pw, w.sh, w.sw, w.dh, w.dw, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            "cudnnSetConvolution2dDescriptor");
      check(cudnnSetConvolutionGroupCount(*d, g), "cudnnSetConvolutionGroupCount");
      check(cudnnSetConvolutionMathType(*d, ctx().tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
            "cudnnSetConvolutionMathType");
    }
    int dims[4];
    check(cudnnGetConvolutionNdForwardOutputDim(fwd_desc_, in().td, filter_, 4, dims),
          "cudnnGetConvolutionNdForwardOutputDim");
    for (int i = 0; i < 4; ++i)
      require(dims[i] == out().desc.dims[static_cast<size_t>(i)], "layer '", spec_.name,
              "': cuDNN computes another output size than the network's");
    out().out = plan_.alloc(Shape(out().desc.dims.begin(), out().desc.dims.end()));
    if (spec_.bias) bias_ = tensor_desc(Desc4{{1, k, 1, 1}, {k, 1, 1, 1}});
    fwd_ = choose(ConvPass::kForward, fwd_desc_);
    fwd.push_back({[this] {
      check(cudnnConvolutionForward(ctx().cudnn, &kOne, in().td, in().x(), filter_, plan_.param(spec_.params[0]),
                                    fwd_desc_, static_cast<cudnnConvolutionFwdAlgo_t>(fwd_.algo), plan_.workspace(),
                                    plan_.workspace_bytes(), &kZero, out().td, out().x()),
            "cudnnConvolutionForward");
      if (spec_.bias)
        check(cudnnAddTensor(ctx().cudnn, &kOne, bias_, plan_.param(spec_.params[1]), &kOne, out().td, out().x()),
              "cudnnAddTensor");
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    filter_pass_ = choose(ConvPass::kBackwardFilter, filter_desc_);
    bwd.push_back({[this] {
      check(cudnnConvolutionBackwardFilter(ctx().cudnn, &kOne, in().td, in().x(), out().td, out().dx(), filter_desc_,
                                           static_cast<cudnnConvolutionBwdFilterAlgo_t>(filter_pass_.algo),
                                           plan_.workspace(), plan_.workspace_bytes(), &kZero, filter_,
                                           plan_.grad(spec_.params[0])),
            "cudnnConvolutionBackwardFilter");
      if (spec_.bias)
        check(cudnnConvolutionBackwardBias(ctx().cudnn, &kOne, out().td, out().dx(), &kZero, bias_,
                                           plan_.grad(spec_.params[1])),
              "cudnnConvolutionBackwardBias");
    }});
    plan_.ready(bwd, spec_.params);
    if (in().needs_grad) {
      data_pass_ = choose(ConvPass::kBackwardData, data_desc_);
      const bool acc = plan_.grad_write(bwd, in());
      bwd.push_back({[this, acc] {
        check(cudnnConvolutionBackwardData(
                  ctx().cudnn, &kOne, filter_, plan_.param(spec_.params[0]), out().td, out().dx(), data_desc_,
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
    key.input = Shape(in().desc.dims.begin(), in().desc.dims.end());
    key.output = Shape(out().desc.dims.begin(), out().desc.dims.end());
    key.filter = {spec_.out_channels, in().sample[0] / spec_.groups, spec_.win.kh, spec_.win.kw};
    key.win = spec_.win;
    key.groups = spec_.groups;
    key.tf32 = ctx().tf32;
    const ConvChoice c = ctx().algos.find(key, [&] { return search(pass, desc); });
    check(cudnnSetConvolutionMathType(desc, static_cast<cudnnMathType_t>(c.math_type)), "cudnnSetConvolutionMathType");
    plan_.need_workspace(c.workspace);
    return c;
  }

  ConvChoice search(ConvPass pass, ConvDesc& desc) {
    cudnnHandle_t h = ctx().cudnn;
    const size_t limit = ctx().workspace_limit;
    ConvChoice c;
    int n = 0;
    switch (pass) {
      case ConvPass::kForward: {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        if (cudnnFindConvolutionForwardAlgorithm(h, in().td, filter_, desc, out().td, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                 &n, perf) == CUDNN_STATUS_SUCCESS &&
            pick(perf, n, limit, c))
          return c;
        check(cudnnGetConvolutionForwardAlgorithm_v7(h, in().td, filter_, desc, out().td,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf),
              "cudnnGetConvolutionForwardAlgorithm_v7");
        if (pick(perf, n, limit, c)) return c;
        break;
      }
      case ConvPass::kBackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (cudnnFindConvolutionBackwardDataAlgorithm(h, filter_, out().td, desc, in().td,
                                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n,
                                                      perf) == CUDNN_STATUS_SUCCESS &&
            pick(perf, n, limit, c))
          return c;
        check(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, filter_, out().td, desc, in().td,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
              "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        if (pick(perf, n, limit, c)) return c;
        break;
      }
      case ConvPass::kBackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (cudnnFindConvolutionBackwardFilterAlgorithm(h, in().td, out().td, desc, filter_,
                                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
                                                        perf) == CUDNN_STATUS_SUCCESS &&
            pick(perf, n, limit, c))
          return c;
        check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, in().td, out().td, desc, filter_,
                                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        if (pick(perf, n, limit, c)) return c;
        break;
      }
    }
    fail(Code::kCudnn, "layer '", spec_.name, "': cuDNN has no convolution algorithm for ",
         shape_string(Shape(in().desc.dims.begin(), in().desc.dims.end())), " within a workspace of ", limit >> 20,
         " MiB");
  }

  FilterDesc filter_;
  ConvDesc fwd_desc_, data_desc_, filter_desc_;
  TensorDesc bias_;
  ConvChoice fwd_, data_pass_, filter_pass_;
};

// y[N, O] = x[N, I] · Wᵀ + b with W [O, I] row-major: in cuBLAS's column-major terms
// Yᵀ = op_T(W) · Xᵀ, where each row-major matrix is read as its transpose.
class DenseLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    n_ = plan_.opt_.batch;
    i_ = in().numel() / n_;
    o_ = spec_.out_channels;
    out().out = plan_.alloc({n_, o_});
    if (spec_.bias) bias_ = tensor_desc(Desc4{{1, o_, 1, 1}, {o_, 1, 1, 1}});
    fwd.push_back({[this] {
      check(cublasSgemm(ctx().cublas, CUBLAS_OP_T, CUBLAS_OP_N, o_, n_, i_, &kOne, plan_.param(spec_.params[0]), i_,
                        in().x(), i_, &kZero, out().x(), o_),
            "cublasSgemm (dense forward)");
      if (spec_.bias)
        check(cudnnAddTensor(ctx().cudnn, &kOne, bias_, plan_.param(spec_.params[1]), &kOne, out().td, out().x()),
              "cudnnAddTensor");
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    bwd.push_back({[this] {
      // dW (column-major I × O) = Xᵀ · dY
      check(cublasSgemm(ctx().cublas, CUBLAS_OP_N, CUBLAS_OP_T, i_, o_, n_, &kOne, in().x(), i_, out().dx(), o_, &kZero,
                        plan_.grad(spec_.params[0]), i_),
            "cublasSgemm (dense weight gradient)");
      if (spec_.bias)
        check(cublasSgemv(ctx().cublas, CUBLAS_OP_N, o_, n_, &kOne, out().dx(), o_, plan_.ones_.data_as<float>(), 1,
                          &kZero, plan_.grad(spec_.params[1]), 1),
              "cublasSgemv (dense bias gradient)");
    }});
    plan_.ready(bwd, spec_.params);
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      bwd.push_back({[this, acc] {
        // dXᵀ (I × N) = W (read as I × O) · dYᵀ
        check(cublasSgemm(ctx().cublas, CUBLAS_OP_N, CUBLAS_OP_N, i_, n_, o_, &kOne, plan_.param(spec_.params[0]), i_,
                          out().dx(), o_, beta_for(acc), in().dx(), i_),
              "cublasSgemm (dense input gradient)");
      }});
    }
    plan_.grad_done(bwd, out());
  }

 private:
  int n_ = 0, i_ = 0, o_ = 0;
  TensorDesc bias_;
};

}  // namespace

std::unique_ptr<CudaLayer> make_conv_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<ConvLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_dense_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<DenseLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda

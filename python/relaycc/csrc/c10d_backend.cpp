// relaycc as a torch.distributed backend (CPU tensors): a c10d::Backend subclass. C++ only because torch's
// API requires it (a Python ProcessGroup replaces the whole group and breaks "cpu:relaycc,cuda:nccl",
// DeviceMesh and FSDP2). Compiled against the user's installed torch by relaycc/torch_backend.py.
//
// Shape: relaycc serves what its C core serves on a whole-comm layout (all-reduce, all-gather,
// reduce-scatter, all-to-all even and uneven, gather, scatter, broadcast, reduce, barrier) and tag-0
// point-to-point (relaySend/relayRecv in groups, see send); every other call (tagged send/recv,
// bitwise reductions, dtypes it lacks) is forwarded to an inner gloo backend created from the same
// store. Every routing decision reads only facts that are equal on every rank of a correct torch program
// (the op, the reduce op, the dtype, the agreed sizes of a collective's outputs, whether split sizes
// were given; for a transfer, what both ends of its pair share), never a rank-local fact, so the ranks
// stay in one lockstep on both comms.
//
// Execution: a synchronous relaycc call runs on the caller's thread (CPU: the data is in place when it
// returns); an asynchronous one (asyncOp: DDP's buckets, async_op=True) runs on the group's worker thread,
// FIFO, and its Work completes there; the Work's Future holds the output tensors (DDP's comm hook reads
// them). Forwarded calls return gloo's own Work. A relaycc call first waits for the forwarded Works still
// in flight, and a forwarded call for the queued relaycc calls, so the two comms never run calls of one
// group out of the program's order.
//
// The relaycc comm is created at the group's first relaycc call (every rank reaches it in the same
// order: it is a collective), not in the creator, so that hundreds of new_group calls hold no shared
// memory until they run a collective. Its name is the token rank 0 put in the group's store (the
// creator), its deadline the group's timeout.
#include <torch/extension.h>
#include <torch/version.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "relaycc.h"

namespace {

using c10d::OpType;
using c10d::ReduceOp;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// A relaycc call's Work: completed by the worker thread (async calls) or by the caller (sync ones); its
// Future holds the outputs (DDP's comm hook reads them) or the error, which wait() and the Future rethrow.
class RelayWork : public c10d::Work {
 public:
  // devices: a CUDA call's device; its Future then records an event on the current stream when it
  // completes and a consumer's stream waits for it (torch's Future does both), as ProcessGroupNCCL's.
  RelayWork(int rank, OpType type, std::vector<at::Tensor> outputs, std::vector<c10::Device> devices = {})
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        cuda_(!devices.empty()),
        future_(c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                        std::move(devices))) {}
  void complete(std::exception_ptr err) {
    if (err) {
      future_->setError(err);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(err);
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  // wait() on a CUDA call: the current stream waits for the call's stream (no host wait; the kernels
  // are queued when the call returns).
  void synchronize() override {
    if (cuda_ && future_->completed() && !future_->hasError()) future_->wait();
  }

 private:
  std::vector<at::Tensor> outputs_;
  bool cuda_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The point-to-point transfers issued and not started yet, shared by the backend and their Works (a Work
// may outlive its backend). A transfer is deferred, not run at issue, because torch's send and isend are
// one call (send = isend + wait) and a blocking transfer run at issue would deadlock a ring of isend and
// irecv: the deferred ones start, in issue order, as relaycc groups (relayGroupStart/End, see runP2P)
// when a Work of theirs is waited on or polled, at batch_isend_irecv's end, or before the group's next
// collective (program order). `start` is the backend's flush; empty once the backend is released.
struct P2PQueue {
  struct Op {
    bool isSend;
    at::Tensor tensor;
    int peer;
    std::string reject;  // non-empty: the binding rejects this transfer (through the C core)
    c10::intrusive_ptr<RelayWork> work;
  };
  std::mutex mu;
  std::vector<Op> pending;
  std::function<void()> start;
};

// A send's or receive's Work: waiting on it, polling it or taking its Future starts the deferred
// transfers (its own among them) on the group's worker thread.
class P2PWork : public RelayWork {
 public:
  P2PWork(std::shared_ptr<P2PQueue> q, int rank, OpType type, std::vector<at::Tensor> outputs, int peer)
      : RelayWork(rank, type, std::move(outputs)), q_(std::move(q)), peer_(peer) {}
  bool wait(std::chrono::milliseconds timeout) override {
    kick();
    return RelayWork::wait(timeout);
  }
  bool isCompleted() override {
    kick();
    return RelayWork::isCompleted();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    kick();
    return RelayWork::getFuture();
  }
  int sourceRank() const override { return peer_; }

 private:
  void kick() {
    if (kicked_.exchange(true)) return;
    std::lock_guard<std::mutex> g(q_->mu);
    if (q_->start) q_->start();
  }
  std::shared_ptr<P2PQueue> q_;
  int peer_;
  std::atomic<bool> kicked_{false};
};

// The relaycc datatype of a dtype the reducing calls serve; -1: none (such a call is forwarded).
int relayDtype(at::ScalarType t) {
  switch (t) {
    case at::kChar: return relayInt8;
    case at::kByte: return relayUint8;
    case at::kInt: return relayInt32;
    case at::kLong: return relayInt64;
    case at::kHalf: return relayFloat16;
    case at::kFloat: return relayFloat32;
    case at::kDouble: return relayFloat64;
    case at::kBFloat16: return relayBfloat16;
    default: return -1;
  }
}

// The relaycc op of a torch reduce op; -1: none. PREMUL_SUM is SUM after the input is scaled.
int relayOp(const ReduceOp& op) {
  switch (op.op_) {
    case ReduceOp::SUM: return relaySum;
    case ReduceOp::AVG: return relayAvg;
    case ReduceOp::PRODUCT: return relayProd;
    case ReduceOp::MIN: return relayMin;
    case ReduceOp::MAX: return relayMax;
    case ReduceOp::PREMUL_SUM: return relaySum;
    default: return -1;
  }
}

const char* opName(const ReduceOp& op) {
  switch (op.op_) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::PRODUCT: return "PRODUCT";
    case ReduceOp::MIN: return "MIN";
    case ReduceOp::MAX: return "MAX";
    case ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    case ReduceOp::BAND: return "BAND";
    case ReduceOp::BOR: return "BOR";
    case ReduceOp::BXOR: return "BXOR";
    default: return "UNUSED";
  }
}

// PREMUL_SUM's factor times t, in t's dtype (a tensor factor or a double one, as
// dist._make_nccl_premul_sum makes them).
void premultiply(at::Tensor& t, const ReduceOp& op) {
  auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(sup != nullptr, "relaycc: PREMUL_SUM without its factor");
  if (sup->tensor_factor.defined()) {
    t.mul_(sup->tensor_factor.to(t.device()));
  } else {
    t.mul_(sup->double_factor);
  }
}

bool reducible(const at::Tensor& t, const ReduceOp& op) {
  if (relayDtype(t.scalar_type()) < 0 || relayOp(op) < 0) return false;
  // PREMUL_SUM on integers has no meaning torch defines (NCCL: floating types only).
  return op.op_ != ReduceOp::PREMUL_SUM || at::isFloatingType(t.scalar_type());
}

class RelayBackend : public c10d::Backend {
 public:
  // cudaInner: torch's ProcessGroupNCCL of the group (CUDA tensors), or null; cudaComm: relaycc's guest
  // comm on its NCCL communicator (relayCommInitNccl, in the creator), or null: every CUDA call is NCCL's.
  RelayBackend(c10::intrusive_ptr<c10d::Backend> inner, int rank, int size, std::string token, int timeoutMs,
               bool useRelay, c10::intrusive_ptr<c10d::Backend> cudaInner, relayComm_t cudaComm,
               int cudaDevice)
      : c10d::Backend(rank, size),
        inner_(std::move(inner)),
        cudaInner_(std::move(cudaInner)),
        cudaComm_(cudaComm),
        cudaDevice_(cudaDevice),
        token_(std::move(token)),
        timeoutMs_(timeoutMs),
        useRelay_(useRelay) {
    ranks_.resize(size);
    std::iota(ranks_.begin(), ranks_.end(), 0);
    p2p_->start = [this] { startP2PLocked(); };
  }

  ~RelayBackend() override { release(false); }

  const std::string getBackendName() const override { return "relaycc"; }

  // ---- what relaycc serves ---------------------------------------------------------------------

  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    if (tensors.size() == 1 && reducible(tensors[0], opts.reduceOp) &&
        cudaRoutes(tensors[0], relayCollectiveAllReduce, tensors[0].numel(),
                   relayDtype(tensors[0].scalar_type()), relayOp(opts.reduceOp)))
      return runCuda(OpType::ALLREDUCE, "all_reduce", tensors, [=]() mutable {
        onDevice(relayCollectiveAllReduce, tensors[0].numel(), tensors[0], opts.reduceOp);
        reduceInPlace(tensors[0], opts.reduceOp);
      });
    if (tensors.size() != 1 || !relayable(tensors[0]) || !reducible(tensors[0], opts.reduceOp))
      return forward([&] { return innerFor(tensors)->allreduce(tensors, opts); });
    return run(
        OpType::ALLREDUCE, "all_reduce", tensors, [=]() mutable { reduceInPlace(tensors[0], opts.reduceOp); },
        opts.asyncOp);
  }

  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    bool ok = !tensors.empty();
    for (auto& t : tensors) ok = ok && relayable(t) && reducible(t, opts.reduceOp);
    if (!ok) return forward([&] { return innerFor(tensors)->allreduce_coalesced(tensors, opts); });
    return run(
        OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors,
        [=]() mutable {
          for (auto& t : tensors) reduceInPlace(t, opts.reduceOp);
        },
        opts.asyncOp);
  }

  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts) override {
    if (inputs.size() != 1 || outputs.size() != 1 || !relayable(inputs[0]) ||
        !sameKind(outputs[0], inputs[0]))
      return forward([&] { return innerFor(inputs)->allgather(outputs, inputs, opts); });
    return run(
        OpType::ALLGATHER, "all_gather", outputs[0], [=]() mutable { gatherList(outputs[0], inputs[0]); },
        opts.asyncOp);
  }

  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override {
    if (output.scalar_type() == input.scalar_type() &&
        cudaRoutes(input, relayCollectiveAllGather, bytesOf(input), relayUint8, relaySum))
      return runCuda(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output}, [=]() mutable {
        onDevice(relayCollectiveAllGather, bytesOf(input), output);
        gatherFlat(output, input);
      });
    if (!relayable(input) || !relayable(output) || output.scalar_type() != input.scalar_type())
      return forward([&] { return innerFor(input)->_allgather_base(output, input, opts); });
    std::vector<at::Tensor> outs{output};
    return run(
        OpType::_ALLGATHER_BASE, "all_gather_into_tensor", outs, [=]() mutable { gatherFlat(output, input); },
        opts.asyncOp);
  }

  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    bool ok = outputs.size() == inputs.size();
    for (size_t i = 0; ok && i < inputs.size(); i++)
      ok = relayable(inputs[i]) && relayable(outputs[i]) &&
           outputs[i].scalar_type() == inputs[i].scalar_type();
    if (!ok)
      return forward(
          [&] { return innerFor(inputs)->allgather_into_tensor_coalesced(outputs, inputs, opts); });
    return run(
        OpType::COALESCED, "all_gather_into_tensor_coalesced", outputs,
        [=]() mutable {
          for (size_t i = 0; i < inputs.size(); i++) gatherFlat(outputs[i], inputs[i]);
        },
        opts.asyncOp);
  }

  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    if (outputs.size() != 1 || inputs.size() != 1 || !relayable(outputs[0]) ||
        !reducible(outputs[0], opts.reduceOp) || !sameKind(inputs[0], outputs[0]))
      return forward([&] { return innerFor(outputs)->reduce_scatter(outputs, inputs, opts); });
    return run(
        OpType::REDUCE_SCATTER, "reduce_scatter", outputs,
        [=]() mutable {
          // The blocks back to back: gloo's list call is one all-reduce per rank (pytorch PR #149869).
          at::Tensor flat = at::cat(flatViews(inputs[0]));
          at::Tensor out = outputs[0].view(-1);
          scatterReduce(out, flat, opts.reduceOp, true);
        },
        opts.asyncOp);
  }

  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    if (output.scalar_type() == input.scalar_type() && reducible(input, opts.reduceOp) &&
        cudaRoutes(output, relayCollectiveReduceScatter, output.numel(), relayDtype(output.scalar_type()),
                   relayOp(opts.reduceOp)))
      return runCuda(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output}, [=]() mutable {
        onDevice(relayCollectiveReduceScatter, output.numel(), input, opts.reduceOp);
        scatterReduce(output, input, opts.reduceOp, false);
      });
    if (!relayable(output) || !relayable(input) || output.scalar_type() != input.scalar_type() ||
        !reducible(input, opts.reduceOp))
      return forward([&] { return innerFor(input)->_reduce_scatter_base(output, input, opts); });
    std::vector<at::Tensor> outs{output};
    return run(
        OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", outs,
        [=]() mutable { scatterReduce(output, input, opts.reduceOp, false); }, opts.asyncOp);
  }

  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    bool ok = outputs.size() == inputs.size();
    for (size_t i = 0; ok && i < inputs.size(); i++)
      ok = relayable(inputs[i]) && relayable(outputs[i]) &&
           outputs[i].scalar_type() == inputs[i].scalar_type() && reducible(inputs[i], opts.reduceOp);
    if (!ok)
      return forward(
          [&] { return innerFor(inputs)->reduce_scatter_tensor_coalesced(outputs, inputs, opts); });
    return run(
        OpType::COALESCED, "reduce_scatter_tensor_coalesced", outputs,
        [=]() mutable {
          for (size_t i = 0; i < inputs.size(); i++)
            scatterReduce(outputs[i], inputs[i], opts.reduceOp, false);
        },
        opts.asyncOp);
  }

  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                        std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) override {
    // Split sizes given: all-to-all-v (relayAllToAllv), else the even all-to-all. Whether they are given is
    // part of the call's form (all_to_all_single with or without splits), the same on every rank.
    bool splits = !outputSplits.empty() || !inputSplits.empty();
    if (!splits && input.scalar_type() == output.scalar_type() &&
        cudaRoutes(input, relayCollectiveAllToAll, bytesOf(input) / size_, relayUint8, relaySum))
      return runCuda(OpType::ALLTOALL_BASE, "all_to_all_single", {output}, [=]() mutable {
        onDevice(relayCollectiveAllToAll, bytesOf(input) / size_, output);
        allToAll(output, input);
      });
    if (!relayable(input) || !relayable(output) || input.scalar_type() != output.scalar_type())
      return forward(
          [&] { return innerFor(input)->alltoall_base(output, input, outputSplits, inputSplits, opts); });
    std::vector<at::Tensor> outs{output};
    if (splits)
      return run(
          OpType::ALLTOALL_BASE, "all_to_all_single_v", outs,
          [=]() mutable { allToAllSplit(output, input, outputSplits, inputSplits); }, opts.asyncOp);
    return run(
        OpType::ALLTOALL_BASE, "all_to_all_single", outs, [=]() mutable { allToAll(output, input); },
        opts.asyncOp);
  }

  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts) override {
    if (inputs.size() != 1 || !relayable(inputs[0]))
      return forward([&] { return innerFor(inputs)->gather(outputs, inputs, opts); });
    int root = static_cast<int>(opts.rootRank);
    std::vector<at::Tensor> outs = rank_ == root && !outputs.empty() ? outputs[0] : std::vector<at::Tensor>{};
    return run(
        OpType::GATHER, "gather", outs, [=]() mutable { rooted(true, root, outs, inputs[0]); }, opts.asyncOp);
  }

  WorkPtr scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts) override {
    if (outputs.size() != 1 || !relayable(outputs[0]))
      return forward([&] { return innerFor(outputs)->scatter(outputs, inputs, opts); });
    int root = static_cast<int>(opts.rootRank);
    std::vector<at::Tensor> ins = rank_ == root && !inputs.empty() ? inputs[0] : std::vector<at::Tensor>{};
    return run(
        OpType::SCATTER, "scatter", outputs, [=]() mutable { rooted(false, root, ins, outputs[0]); },
        opts.asyncOp);
  }

  WorkPtr reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    if (tensors.size() != 1 || !relayable(tensors[0]) || !reducible(tensors[0], opts.reduceOp)) {
      // gloo uses a non-root's tensor as scratch; a non-root's tensor is its input only (as NCCL keeps it),
      // so gloo gets a copy there.
      if (rank_ == opts.rootRank || tensors.size() != 1)
        return forward([&] { return innerFor(tensors)->reduce(tensors, opts); });
      std::vector<at::Tensor> scratch{tensors[0].clone()};
      return forward([&] { return innerFor(scratch)->reduce(scratch, opts); });
    }
    int root = static_cast<int>(opts.rootRank);
    return run(
        OpType::REDUCE, "reduce", tensors, [=]() mutable { reduceToRoot(tensors[0], opts.reduceOp, root); },
        opts.asyncOp);
  }

  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    if (tensors.size() != 1 || !relayable(tensors[0]))
      return forward([&] { return innerFor(tensors)->broadcast(tensors, opts); });
    int root = static_cast<int>(opts.rootRank);
    return run(
        OpType::BROADCAST, "broadcast", tensors, [=]() mutable { broadcastFrom(tensors[0], root); },
        opts.asyncOp);
  }

  // relayBarrier orders the ranks' host calls; relaycc's CPU calls are done when they return, and run()
  // waits for the forwarded ones first. With a CUDA side, NCCL's barrier on the group's device: it also
  // orders the GPU work before it, as a group of torch's own NCCL does (relaycc's CUDA calls run on the
  // caller's stream, which NCCL's stream waits for).
  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    if (cudaInner_) {
      c10d::BarrierOptions o = opts;
      o.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cudaDevice_));
      return forward([&] { return cudaInner_->barrier(o); });
    }
    if (!useRelay_) return forward([&] { return inner_->barrier(opts); });
    return run(
        OpType::BARRIER, "barrier", {}, [this]() { check(relayBarrier(cur_, stream_)); }, false);
  }

  // ---- all-to-all of lists; forwarded ----------------------------------------------------------------

  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts) override {
    if (cudaInner_ && !inputs.empty() && inputs[0].is_cuda())
      return forward([&] { return cudaInner_->alltoall(outputs, inputs, opts); });
    // Lists of any sizes (each rank's own): one all-to-all-v of the flattened lists, relaycc's
    // (relayAllToAllv) where every tensor is relayable and of the inputs' dtype, else gloo's.
    TORCH_CHECK(outputs.size() == static_cast<size_t>(size_) && inputs.size() == static_cast<size_t>(size_),
                "relaycc: all_to_all needs ", size_, " input and output tensors");
    if (sameKind(inputs, inputs[0]) && sameKind(outputs, inputs[0]))
      return run(
          OpType::ALLTOALL, "all_to_all", outputs,
          [=]() mutable {
            std::vector<size_t> sc, rc;
            for (auto& t : inputs) sc.push_back(bytesOf(t));
            for (auto& t : outputs) rc.push_back(bytesOf(t));
            at::Tensor in = at::cat(flatViews(inputs));
            int64_t total = static_cast<int64_t>(std::accumulate(rc.begin(), rc.end(), size_t(0)));
            at::Tensor out = at::empty({total}, inputs[0].options().dtype(at::kByte));
            allToAllBytes(in, sc, out, rc);
            int64_t off = 0;
            for (size_t i = 0; i < outputs.size(); i++) {
              int64_t b = static_cast<int64_t>(rc[i]);
              outputs[i].view(-1).view(at::kByte).copy_(out.narrow(0, off, b));
              off += b;
            }
          },
          opts.asyncOp);
    std::vector<int64_t> inSplits, outSplits;
    for (auto& t : inputs) inSplits.push_back(t.numel());
    for (auto& t : outputs) outSplits.push_back(t.numel());
    at::Tensor in = at::cat(flatViews(inputs));
    at::Tensor out =
        at::empty({std::accumulate(outSplits.begin(), outSplits.end(), int64_t(0))}, outputs[0].options());
    // Synchronous: torch 2.15's gloo returns no Work for a call that is not async (it waited itself).
    c10d::AllToAllOptions sync = opts;
    sync.asyncOp = false;
    startP2P();
    drainRelay();
    drainForwarded();
    // gloo takes the split vectors by reference and may move them away: pass copies.
    std::vector<int64_t> outArg = outSplits, inArg = inSplits;
    WorkPtr w = inner_->alltoall_base(out, in, outArg, inArg, sync);
    if (w) w->wait();
    int64_t off = 0;
    for (size_t i = 0; i < outputs.size(); i++) {
      outputs[i].view(-1).copy_(out.narrow(0, off, outSplits[i]));
      off += outSplits[i];
    }
    auto done = c10::make_intrusive<RelayWork>(rank_, OpType::ALLTOALL, outputs);
    done->complete(nullptr);
    return done;
  }
  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override {
    return forward([&] { return innerFor(inputs)->allgather_coalesced(outputs, inputs, opts); });
  }
  // ---- point-to-point ----------------------------------------------------------------------------
  //
  // Tag 0 (torch's default: dist.send/recv, isend/irecv, batch_isend_irecv, the object calls) goes to
  // relaycc: a pair's transfers match in the order each end issues them, as ProcessGroupNCCL's do (NCCL
  // has no tags). A tag != 0 goes to gloo, which matches by tag: both ends of a transfer carry the same
  // tag in a program correct under gloo, so a send on relaycc never meets a receive on gloo, and tagged
  // traffic keeps gloo's meaning. A receive from any source (src=None) is gloo's with a tag; with tag 0
  // it is rejected through the C core (no peer to tell; NCCL has none either), since its sender's tag-0
  // send is relaycc's. Forwarded transfers' Works are gloo's, not remembered: gloo's can be waited on
  // once only (a second wait blocks for ever), except inside batch_isend_irecv, whose one Work
  // (endCoalescing's) waits for them.
  WorkPtr send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override {
    return p2p(true, tensors, dstRank, tag);
  }
  WorkPtr recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override {
    return p2p(false, tensors, srcRank, tag);
  }
  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    if (p2pForwarded(tensors, tag))
      return forwardP2P([&] { return innerFor(tensors)->recvAnysource(tensors, tag); });
    return p2p(false, tensors, -1, tag,
               "a receive from any source (src=None) with tag 0: relaycc matches a pair's transfers in "
               "order, as NCCL (which has no any-source receive) does; name the source, or give the "
               "senders and this receive a tag != 0 (gloo's)");
  }

  // batch_isend_irecv (torch calls it coalescing): the batch's transfers are deferred like any, and its
  // end starts them (with any deferred before); its Work also waits for the batch's forwarded (tagged)
  // transfers.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override {
    std::lock_guard<std::mutex> g(p2p_->mu);
    coalescing_ = true;
  }
  WorkPtr endCoalescing() override {
    std::vector<WorkPtr> fwd;
    std::vector<at::Tensor> outs;
    std::vector<P2PQueue::Op> ops;
    bool open;
    {
      std::lock_guard<std::mutex> g(p2p_->mu);
      coalescing_ = false;
      fwd.swap(coalescedForwarded_);
      ops.swap(p2p_->pending);
      open = static_cast<bool>(p2p_->start);
    }
    for (auto& op : ops)
      if (op.tensor.defined()) outs.push_back(op.tensor);
    auto work = c10::make_intrusive<RelayWork>(rank_, OpType::COALESCED, outs);
    auto task = [this, ops, fwd, work]() mutable {
      std::exception_ptr err = ops.empty() ? nullptr : runP2P(ops);
      for (auto& w : fwd) {
        try {
          w->wait();
        } catch (...) {
          if (!err) err = std::current_exception();
        }
      }
      work->complete(err);
    };
    if (open) {
      enqueue(std::move(task));
    } else {  // released (torch's abort runs inside a coalescing block): nothing is started
      failP2P(ops);
      work->complete(ops.empty() ? nullptr : releasedError());
    }
    return work;
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override {
    startP2P();
    drainRelay();
    inner_->monitoredBarrier(opts, waitAllRanks);
  }

  // ---- lifecycle ---------------------------------------------------------------------------------

  // relayCommAbort is safe while a call is in flight on another thread: it wakes that call, which then
  // fails, and tells the peers. So no lock here.
  void abort() override {
    release(true);
    inner_->abort();
    if (cudaInner_) cudaInner_->abort();
  }
  void shutdown() override {
    release(false);
    inner_->shutdown();
    if (cudaInner_) cudaInner_->shutdown();
  }
  // relaycc's part of an abort, for torch's own abort of the inner NCCL group (its watchdog's: the
  // creator registers this as that group's abort hook where torch has them): relaycc's waits and
  // kernels end before NCCL's communicator goes.
  void abortRelay() { release(true); }

  bool cudaActive() const { return cudaComm_ != nullptr; }

  // The group's error state (a c10d::ErrorType value): relaycc's first failure that left a comm unusable (a
  // rejected argument leaves it usable: none), else the inner NCCL's where torch has getError.
  int errorValue() {
    int e = error_.load();
#if defined(TORCH_VERSION_MINOR) && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 7)
    if (e == 0 && cudaInner_) e = static_cast<int>(cudaInner_->getError());
#endif
    return e;
  }
#if defined(TORCH_VERSION_MINOR) && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 7)
  // torch's reading of it (Backend.get_error in Python where torch binds it: 2.15 does, 2.11 does not).
  c10d::ErrorType getError() override { return static_cast<c10d::ErrorType>(errorValue()); }
#endif

  bool relayActive() const { return useRelay_; }
  bool commCreated() {
    std::lock_guard<std::mutex> g(mu_);
    return comm_ != nullptr;
  }
  // How many calls relaycc completed, by op name ("broadcast", "all_to_all_single_v"): what proves that a
  // call was served here and not forwarded (the tests read it).
  std::map<std::string, int64_t> served() {
    std::lock_guard<std::mutex> g(mu_);
    return served_;
  }

 private:
  // CPU tensors only; a non-contiguous tensor is served through a contiguous copy (contiguity is a rank's
  // own fact, so it never decides a route).
  bool relayable(const at::Tensor& t) const { return useRelay_ && t.device().is_cpu() && !t.is_sparse(); }

  // Where a call relaycc does not serve goes: NCCL (CUDA tensors, when the group has it), else gloo.
  c10d::Backend* innerFor(const at::Tensor& t) const {
    return cudaInner_ && t.is_cuda() ? cudaInner_.get() : inner_.get();
  }
  c10d::Backend* innerFor(const std::vector<at::Tensor>& ts) const {
    return ts.empty() ? inner_.get() : innerFor(ts[0]);
  }

  // The current stream of the group's CUDA device (c10's device-generic interface: no CUDA header, so
  // the extension builds against a CPU-only torch too).
  void* cudaStream() const {
    at::Device dev(at::kCUDA, static_cast<c10::DeviceIndex>(cudaDevice_));
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
  }

  // A CUDA call goes to relaycc when the router predicts its route beats NCCL's collective for it
  // (relayCallRouted). Everything it reads is the same on every rank of a correct program: the op,
  // dtype, reduce op, the count, the tensor's device type, the comm's agreed state and whether the
  // streams capture; never the tensor's device index (onDevice checks that inside the call).
  bool cudaRoutes(const at::Tensor& t, relayCollective_t coll, int64_t count, int dtype, int op) {
    if (!cudaComm_ || !t.is_cuda() || t.is_sparse() || dtype < 0 || op < 0) return false;
    std::lock_guard<std::mutex> g(mu_);
    if (released_) return false;
    relayLayout_t L = layout();
    size_t n = static_cast<size_t>(count);
    int routed = 0;
    c10::DeviceGuard guard(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cudaDevice_)));
    relayResult_t r = relayCallRouted(coll, &n, (relayDataType_t)dtype, (relayRedOp_t)op, &L, cudaComm_,
                                      cudaStream(), &routed);
    return r == relaySuccess && routed;
  }

  // Inside a CUDA call: a tensor on another GPU than the group's (a rank's own fact) is rejected through
  // the C core, so the peers fail this call too instead of waiting for it.
  void onDevice(relayCollective_t coll, int64_t count, const at::Tensor& t,
                const ReduceOp& op = ReduceOp::SUM) {
    if (t.device().index() == cudaDevice_) return;
    bool reduces = coll == relayCollectiveAllReduce || coll == relayCollectiveReduceScatter;
    rejectCall(
        coll, static_cast<size_t>(count), reduces ? relayDtype(t.scalar_type()) : relayUint8,
        reduces ? relayOp(op) : relaySum,
        "tensor on " + t.device().str() + ", the group's device is cuda:" + std::to_string(cudaDevice_));
  }

  // One relaycc call on CUDA tensors: on the caller's thread and its current stream (the GPU work is
  // queued when it returns, as NCCL's is), after the queued and forwarded calls (program order; a
  // forwarded NCCL call's wait() makes the current stream wait for NCCL's stream, no host wait).
  WorkPtr runCuda(OpType type, const char* what, const std::vector<at::Tensor>& outputs,
                  std::function<void()> body) {
    startP2P();
    drainRelay();
    drainForwarded();
    at::Device dev(at::kCUDA, static_cast<c10::DeviceIndex>(cudaDevice_));
    auto work = c10::make_intrusive<RelayWork>(rank_, type, outputs, std::vector<c10::Device>{dev});
    c10::DeviceGuard guard(dev);
    work->complete(execute(what, body, true));
    return work;
  }

  bool sameKind(const std::vector<at::Tensor>& list, const at::Tensor& like) const {
    if (list.size() != static_cast<size_t>(size_)) return false;
    for (auto& t : list)
      if (!relayable(t) || t.scalar_type() != like.scalar_type()) return false;
    return true;
  }

  static std::vector<at::Tensor> flatViews(const std::vector<at::Tensor>& list) {
    std::vector<at::Tensor> v;
    for (auto& t : list) v.push_back(t.reshape(-1));
    return v;
  }

  // A forwarded call: after the queued relaycc calls (program order), and remembered so that the next
  // relaycc call waits for it.
  WorkPtr forward(const std::function<WorkPtr()>& call) {
    startP2P();
    drainRelay();
    WorkPtr w = call();
    std::lock_guard<std::mutex> g(pendingMu_);
    if (w) pending_.push_back(w);
    return w;
  }

  // ---- point-to-point (see send) -------------------------------------------------------------------

  // Whether a transfer is gloo's (NCCL's for CUDA tensors): from facts both ends of a correct pair share
  // (the tag, the group's host check, the tensor's device); a list of other than one tensor stays ours,
  // to be rejected through the C core.
  bool p2pForwarded(const std::vector<at::Tensor>& tensors, int tag) const {
    return tag != 0 || !useRelay_ || (tensors.size() == 1 && !relayable(tensors[0]));
  }

  // A forwarded transfer (a tag, any source) starts the deferred tag-0 ones first: a program may make the
  // tagged one depend on them (an isend, then a tagged recv that its peer sends only after receiving it).
  WorkPtr forwardP2P(const std::function<WorkPtr()>& call) {
    startP2P();
    drainRelay();
    WorkPtr w = call();
    std::lock_guard<std::mutex> g(p2p_->mu);
    if (coalescing_ && w) coalescedForwarded_.push_back(w);
    return w;
  }

  WorkPtr p2p(bool isSend, std::vector<at::Tensor>& tensors, int peer, int tag, std::string reject = "") {
    if (reject.empty() && p2pForwarded(tensors, tag))
      return forwardP2P([&] {
        return isSend ? innerFor(tensors)->send(tensors, peer, tag)
                      : innerFor(tensors)->recv(tensors, peer, tag);
      });
    if (reject.empty() && tensors.size() != 1)
      reject = "a point-to-point call takes one tensor, not " + std::to_string(tensors.size());
    auto work =
        c10::make_intrusive<P2PWork>(p2p_, rank_, isSend ? OpType::SEND : OpType::RECV, tensors, peer);
    P2PQueue::Op op{isSend, tensors.size() == 1 ? tensors[0] : at::Tensor(), peer, reject, work};
    std::lock_guard<std::mutex> g(p2p_->mu);
    if (!p2p_->start) {
      work->complete(releasedError());
    } else {
      p2p_->pending.push_back(std::move(op));
    }
    return work;
  }

  // Start the deferred transfers (all of them, in issue order) on the worker.
  void startP2P() {
    std::lock_guard<std::mutex> g(p2p_->mu);
    if (p2p_->start) p2p_->start();
  }
  // On the worker itself (a Future callback that waits on a transfer's Work, or issues a call) the
  // transfers run here and now: queued behind the running task they would wait for the task that waits
  // for them, with no deadline.
  void startP2PLocked() {  // under p2p_->mu
    if (p2p_->pending.empty()) return;
    std::vector<P2PQueue::Op> ops;
    ops.swap(p2p_->pending);
    bool onWorker;
    {
      std::lock_guard<std::mutex> q(qmu_);  // the lock order: p2p_->mu, then qmu_
      onWorker = worker_.joinable() && std::this_thread::get_id() == worker_.get_id();
    }
    if (onWorker) {
      runP2P(ops);
      return;
    }
    enqueue([this, ops]() mutable { runP2P(ops); });  // each Work holds its own outcome
  }

  // The transfers' count and datatype: the reducing dtypes as themselves (a float32 send meets an int32
  // receive as a mismatch), any other dtype as bytes.
  static void p2pShape(const at::Tensor& t, size_t* count, relayDataType_t* dtype) {
    int dt = relayDtype(t.scalar_type());
    *dtype = dt >= 0 ? (relayDataType_t)dt : relayUint8;
    *count = dt >= 0 ? static_cast<size_t>(t.numel()) : bytesOf(t);
  }

  // The deferred transfers (on the worker), as one relaycc group (relayGroupStart/End), so they progress
  // together: a ring of isend/irecv, a send and a receive with one peer, several to one peer. The shm
  // transport matches a pair's transfers by order, however each end grouped them (check mode 0), so the
  // two ends need not have deferred alike; check mode 1's pair check needs both ends to group a pair's
  // transfers alike (docs/python.md). A failure fails the group's Works (a receive's tensor is then
  // undefined; a send's is never written); a rejected transfer's Work fails with its own reason, its
  // peer's with the C core's text naming it. Returns the first error.
  std::exception_ptr runP2P(std::vector<P2PQueue::Op>& ops) {
    std::vector<size_t> idx(ops.size());
    for (size_t i = 0; i < ops.size(); i++) idx[i] = i;
    return runGroup(ops, idx);
  }

  // One group: relayGroupStart, each send, receive or rejection, relayGroupEnd.
  std::exception_ptr runGroup(std::vector<P2PQueue::Op>& ops, const std::vector<size_t>& idx) {
    std::vector<std::string> own(idx.size());
    std::vector<at::Tensor> bufs(idx.size());
    int sends = 0;
    for (size_t i : idx) sends += ops[i].isSend;
    const char* what = idx.size() > 1 ? "isend/irecv group" : ops[idx[0]].isSend ? "send" : "recv";
    // served_["point_to_point"] counts the groups, served_["send"] and ["recv"] the transfers.
    std::function<void()> body = [&]() {
      curOp_ = what;
      check(relayGroupStart());
      for (size_t k = 0; k < idx.size(); k++) {
        P2PQueue::Op& op = ops[idx[k]];
        size_t n = 0;
        relayDataType_t dt = relayUint8;
        if (op.tensor.defined()) p2pShape(op.tensor, &n, &dt);
        relayResult_t r;
        if (!op.reject.empty()) {
          r = relayCallReject(op.isSend ? relayCollectiveSend : relayCollectiveRecv, &n, dt, relaySum,
                              nullptr, op.peer, op.reject.c_str(), cur_, stream_);
        } else {
          bufs[k] = dense(op.tensor);
          void* b = n > 0 ? bufs[k].data_ptr() : nullptr;
          r = op.isSend ? relaySend(b, n, dt, op.peer, cur_, stream_)
                        : relayRecv(b, n, dt, op.peer, cur_, stream_);
        }
        if (r != relaySuccess) {
          const char* text = relayGetLastError(cur_);
          own[k] = std::string(op.isSend ? "send" : "recv") + " failed" +
                   (op.reject.empty() ? "" : " (" + op.reject + ")") + ": " + relayGetErrorString(r) + ": " +
                   (text ? text : "");
        }
      }
      check(relayGroupEnd());
      for (size_t k = 0; k < idx.size(); k++)
        if (own[k].empty() && !ops[idx[k]].isSend) back(ops[idx[k]].tensor, bufs[k]);
      served_["send"] += sends;
      served_["recv"] += static_cast<int64_t>(idx.size()) - sends;
    };
    std::exception_ptr err = execute("point_to_point", body);
    for (size_t k = 0; k < idx.size(); k++)
      ops[idx[k]].work->complete(err ? err : own[k].empty() ? nullptr : p2pError(own[k]));
    return err;
  }

  std::exception_ptr p2pError(const std::string& text) const {
    return std::make_exception_ptr(c10::DistBackendError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        "relaycc: rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + text));
  }
  std::exception_ptr releasedError() const {
    return p2pError("point-to-point: the group was shut down or aborted before the transfer started");
  }
  void failP2P(std::vector<P2PQueue::Op>& ops) {
    for (auto& op : ops) op.work->complete(releasedError());
  }

  void drainForwarded() {
    std::vector<WorkPtr> ws;
    {
      std::lock_guard<std::mutex> g(pendingMu_);
      ws.swap(pending_);
    }
    for (auto& w : ws) {
      // A forwarded call's failure is its own Work's to report (the caller waits on it); here only the
      // order matters.
      try {
        w->wait();
      } catch (...) {
      }
    }
  }

  // One relaycc call (or a few). Async (opts.asyncOp: DDP's buckets, async_op=True) goes to the worker
  // thread and returns before the data moves, so backward overlaps it; sync runs on the caller's thread
  // after the queued calls (program order). The Work carries a DistBackendError that names this rank, the
  // op and relaycc's own text.
  WorkPtr run(OpType type, const char* what, const std::vector<at::Tensor>& outputs,
              std::function<void()> body, bool async) {
    startP2P();  // the transfers issued before this call go first, on every rank: program order
    drainForwarded();
    auto work = c10::make_intrusive<RelayWork>(rank_, type, outputs);
    auto task = [this, work, what, body = std::move(body)]() mutable { work->complete(execute(what, body)); };
    if (async) {
      enqueue(std::move(task));
    } else {
      drainRelay();
      task();
    }
    return work;
  }

  std::exception_ptr execute(const char* what, std::function<void()>& body, bool cuda = false) {
    std::lock_guard<std::mutex> g(mu_);
    curOp_ = what;
    cur_ = nullptr;
    stream_ = nullptr;
    try {
      if (cuda) {
        TORCH_CHECK(!released_, "relaycc: the group was shut down or aborted");
        cur_ = cudaComm_;
        stream_ = cudaStream();
      } else {
        ensureComm();
        cur_ = comm_;
      }
      body();
      served_[what]++;
    } catch (const c10::DistBackendError&) {
      return std::current_exception();
    } catch (const std::exception& e) {
      return std::make_exception_ptr(c10::DistBackendError(
          {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, "relaycc: rank " + std::to_string(rank_) +
                                                                     " of " + std::to_string(size_) + ": " +
                                                                     what + ": " + e.what()));
    }
    return nullptr;
  }

  // The worker: one thread per group, started at the first async call, FIFO (relaycc's calls on one comm
  // never race, and they keep the group's order). It never touches Python; a Future callback that does
  // takes the GIL itself.
  void enqueue(std::function<void()> task) {
    std::lock_guard<std::mutex> g(qmu_);
    if (!worker_.joinable()) worker_ = std::thread([this] { workerLoop(); });
    queue_.push_back(std::move(task));
    queued_++;
    qcv_.notify_all();
  }

  void workerLoop() {
    std::unique_lock<std::mutex> lk(qmu_);
    for (;;) {
      qcv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      auto task = std::move(queue_.front());
      queue_.pop_front();
      lk.unlock();
      task();
      lk.lock();
      done_++;
      qcv_.notify_all();
    }
  }

  // Wait until every queued relaycc call has run (a sync call or a forwarded one keeps program order).
  void drainRelay() {
    std::unique_lock<std::mutex> lk(qmu_);
    if (std::this_thread::get_id() == worker_.get_id()) return;  // a Future callback on the worker
    uint64_t upTo = queued_;
    qcv_.wait(lk, [&] { return done_ >= upTo; });
  }

  void stopWorker() {
    {
      std::lock_guard<std::mutex> g(qmu_);
      stop_ = true;
      qcv_.notify_all();
    }
    if (!worker_.joinable()) return;
    // The last reference dropped by a Future callback on the worker itself: it cannot join itself.
    if (std::this_thread::get_id() == worker_.get_id()) {
      worker_.detach();
    } else {
      worker_.join();
    }
  }

  [[noreturn]] void fail(relayResult_t res) {
    const char* text = relayGetLastError(cur_);
    // The group's error state (getError): ErrorType's TIMEOUT 1, COMM_ERROR 2, REMOTE_ERROR 3 (Backend.hpp),
    // the first one kept. Not for a rejected argument, nor a peer's buffer error (relaycc.h: the comm
    // stays usable after both; the core's text for the second says so).
    // Point-to-point (relaycc.h): a send and receive whose count or datatype differ, and a peer's rejected
    // transfer, are drained with the pair kept in step: the comm stays usable after both too.
    bool usable = res == relayInvalidArgument ||
                  (res == relayRemoteError && text &&
                   (strstr(text, "passed a bad buffer") || strstr(text, "rejected its point-to-point"))) ||
                  (res == relayInvalidUsage && text && strstr(text, "the pair's counts or datatypes differ"));
    int kind = res == relayTimeout ? 1 : res == relayRemoteError ? 3 : 2, none = 0;
    if (!usable) error_.compare_exchange_strong(none, kind);
    std::string msg = "relaycc: rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                      curOp_ + " failed: " + relayGetErrorString(res) + (text && *text ? ": " : "") +
                      (text ? text : "");
    C10_THROW_ERROR(DistBackendError, msg);
  }

  void check(relayResult_t res) {
    if (res != relaySuccess) fail(res);
  }

  void ensureComm() {
    TORCH_CHECK(!released_, "relaycc: the group was shut down or aborted");
    if (comm_) return;
    relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
    cfg.timeoutMs = timeoutMs_;
    relayComm_t c = nullptr;
    check(relayCommInitShmUnique(&c, size_, rank_, token_.c_str(), &cfg));
    comm_ = c;
  }

  relayLayout_t layout() const { return relayLayout_t{1, size_, ranks_.data()}; }

  // A contiguous tensor for t: t itself, or a copy that `back` copies into t afterwards.
  static at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
  static void back(at::Tensor& t, const at::Tensor& d) {
    if (!d.is_same(t)) t.copy_(d);
  }

  void reduceInPlace(at::Tensor& t, const ReduceOp& op) {
    at::Tensor d = dense(t);
    size_t n = static_cast<size_t>(d.numel());
    if (op.op_ == ReduceOp::PREMUL_SUM) premultiply(d, op);
    if (n > 0) {
      relayLayout_t L = layout();
      check(relayAllReduce(d.data_ptr(), d.data_ptr(), &n, (relayDataType_t)relayDtype(d.scalar_type()),
                           (relayRedOp_t)relayOp(op), &L, cur_, stream_));
    }
    back(t, d);
  }

  // The group's layout is the group in rank order, so the root's position in it (relayBroadcast's and
  // relayReduce's rootIndex) is its group rank. Bytes: any dtype is served as uint8.
  void broadcastFrom(at::Tensor& t, int root) {
    at::Tensor d = dense(t);
    size_t n = bytesOf(d);
    if (n > 0) {
      relayLayout_t L = layout();
      check(relayBroadcast(d.data_ptr(), d.data_ptr(), &n, relayUint8, root, &L, cur_, stream_));
    }
    back(t, d);
  }

  // The root's tensor gets the result; a non-root's stays its input (as NCCL keeps it; relayReduce only
  // reads a non-root's send buffer). PREMUL_SUM scales a copy, so no input changes.
  void reduceToRoot(at::Tensor& t, const ReduceOp& op, int root) {
    at::Tensor in = dense(t), out = in;
    if (op.op_ == ReduceOp::PREMUL_SUM) {
      in = in.clone();
      premultiply(in, op);
    }
    size_t n = static_cast<size_t>(in.numel());
    if (n > 0) {
      relayLayout_t L = layout();
      check(relayReduce(in.data_ptr(), rank_ == root ? out.data_ptr() : nullptr, &n,
                        (relayDataType_t)relayDtype(in.scalar_type()), (relayRedOp_t)relayOp(op), root, &L,
                        cur_, stream_));
    }
    if (rank_ == root) back(t, out);
  }

  // This rank cannot make the call (a size that breaks c10d's contract): it rejects it through the C core
  // (relayCallReject, with the shape a valid call here would pass), so its peers fail the call too instead
  // of waiting for it until the deadline; never a local throw alone.
  [[noreturn]] void rejectCall(relayCollective_t coll, size_t count, int dtype, int op,
                               const std::string& why) {
    relayLayout_t L = layout();
    fail(relayCallReject(coll, &count, (relayDataType_t)dtype, (relayRedOp_t)op, &L, 0, why.c_str(), cur_,
                         stream_));
  }

  // Non-reducing calls move bytes: any dtype (bool, int16, complex) is served as uint8.
  static size_t bytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

  void gatherFlat(at::Tensor& output, const at::Tensor& input) {
    at::Tensor in = dense(input), out = dense(output);
    size_t n = bytesOf(in);
    if (bytesOf(out) != n * size_)
      rejectCall(relayCollectiveAllGather, n, relayUint8, relaySum,
                 "output has " + std::to_string(out.numel()) + " elements, not " + std::to_string(size_) +
                     " x " + std::to_string(in.numel()));
    if (n > 0) {
      relayLayout_t L = layout();
      check(relayAllGather(in.data_ptr(), out.data_ptr(), &n, relayUint8, &L, cur_, stream_));
    }
    back(output, out);
  }

  // The list all-gather. The outputs' sizes are the same list on every rank (c10d's contract), so the
  // padded block, max(sizes), is agreed too: uneven sizes go through one all-gather of padded blocks.
  void gatherList(std::vector<at::Tensor>& outputs, const at::Tensor& input) {
    int64_t block = 0;
    for (auto& t : outputs) block = std::max<int64_t>(block, t.numel());
    if (outputs[rank_].numel() != input.numel())
      rejectCall(relayCollectiveAllGather, static_cast<size_t>(block) * input.element_size(), relayUint8,
                 relaySum,
                 "output " + std::to_string(rank_) + " has " + std::to_string(outputs[rank_].numel()) +
                     " elements, the input " + std::to_string(input.numel()));
    bool even = true;
    for (auto& t : outputs) even = even && t.numel() == block;
    at::Tensor in = dense(input).view(-1);
    if (!even) in = at::cat({in, at::zeros({block - in.numel()}, in.options())});
    at::Tensor flat = at::empty({block * size_}, input.options());
    size_t n = static_cast<size_t>(block) * input.element_size();
    if (n > 0) {
      relayLayout_t L = layout();
      check(relayAllGather(in.data_ptr(), flat.data_ptr(), &n, relayUint8, &L, cur_, stream_));
    }
    for (int i = 0; i < size_; i++) outputs[i].view(-1).copy_(flat.narrow(0, i * block, outputs[i].numel()));
  }

  // input holds size_ blocks of output's size; `fresh` says input is already a scratch copy.
  void scatterReduce(at::Tensor& output, const at::Tensor& input, const ReduceOp& op, bool fresh) {
    at::Tensor in = dense(input), out = dense(output);
    size_t n = static_cast<size_t>(out.numel());
    if (static_cast<size_t>(in.numel()) != n * size_)
      rejectCall(relayCollectiveReduceScatter, n, relayDtype(in.scalar_type()), relayOp(op),
                 "input has " + std::to_string(in.numel()) + " elements, not " + std::to_string(size_) +
                     " x " + std::to_string(out.numel()));
    if (op.op_ == ReduceOp::PREMUL_SUM) {
      // The input is the caller's and stays unchanged: scale a copy.
      if (!fresh && in.is_same(input)) in = in.clone();
      premultiply(in, op);
    }
    if (n > 0) {
      relayLayout_t L = layout();
      check(relayReduceScatter(in.data_ptr(), out.data_ptr(), &n,
                               (relayDataType_t)relayDtype(in.scalar_type()), (relayRedOp_t)relayOp(op), &L,
                               cur_, stream_));
    }
    back(output, out);
  }

  void allToAll(at::Tensor& output, const at::Tensor& input) {
    at::Tensor in = dense(input), out = dense(output);
    size_t n = bytesOf(in) / size_;
    if (in.numel() != out.numel() || in.numel() % size_ != 0)
      rejectCall(relayCollectiveAllToAll, n, relayUint8, relaySum,
                 "input " + std::to_string(in.numel()) + " and output " + std::to_string(out.numel()) +
                     " elements must be equal and divisible by " + std::to_string(size_));
    if (n > 0) {
      relayLayout_t L = layout();
      check(relayAllToAll(in.data_ptr(), out.data_ptr(), &n, relayUint8, &L, cur_, stream_));
    }
    back(output, out);
  }

  // all_to_all_single with split sizes (rows of dim 0; none given: even rows) through relayAllToAllv in
  // bytes. Splits that do not cover a tensor break c10d's contract: the call is rejected through the C
  // core (the peers fail it too). A rank-local fact decides nothing else here: relayAllToAllv checks
  // that each pair's counts agree.
  void allToAllSplit(at::Tensor& output, const at::Tensor& input, const std::vector<int64_t>& outSplits,
                     const std::vector<int64_t>& inSplits) {
    std::string bad;
    auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& sp, const char* which) {
      std::vector<size_t> c(size_, 0);
      int64_t rows = t.dim() > 0 ? t.size(0) : 0, rowBytes = rows > 0 ? bytesOf(t) / rows : 0, sum = 0;
      if (sp.empty() && rows % size_ != 0)
        bad = std::string(which) + " has " + std::to_string(rows) + " rows, not divisible by " +
              std::to_string(size_);
      if (!sp.empty() && sp.size() != static_cast<size_t>(size_))
        bad = std::string(which) + " splits have " + std::to_string(sp.size()) + " sizes, not " +
              std::to_string(size_);
      for (int i = 0; bad.empty() && i < size_; i++) {
        int64_t r = sp.empty() ? rows / size_ : sp[i];
        if (r < 0) bad = std::string(which) + " split " + std::to_string(i) + " is negative";
        c[i] = static_cast<size_t>(r * rowBytes);
        sum += r;
      }
      if (bad.empty() && sum != rows)
        bad = std::string(which) + " splits add up to " + std::to_string(sum) + " rows, the tensor has " +
              std::to_string(rows);
      return c;
    };
    std::vector<size_t> sc = counts(input, inSplits, "input"), rc = counts(output, outSplits, "output");
    relayLayout_t L = layout();
    if (!bad.empty())
      check(relayCallReject(relayCollectiveAllToAllV, nullptr, relayUint8, relaySum, &L, 0, bad.c_str(), cur_,
                            stream_));
    at::Tensor in = dense(input), out = dense(output);
    allToAllBytes(in, sc, out, rc);
    back(output, out);
  }

  // relayAllToAllv of contiguous in and out, sc/rc bytes per peer, blocks back to back in peer order.
  void allToAllBytes(at::Tensor in, const std::vector<size_t>& sc, at::Tensor& out,
                     const std::vector<size_t>& rc) {
    std::vector<size_t> sd(size_, 0), rd(size_, 0);
    for (int i = 1; i < size_; i++) {
      sd[i] = sd[i - 1] + sc[i - 1];
      rd[i] = rd[i - 1] + rc[i - 1];
    }
    // relayAllToAllv rejects in place; a caller's aliased pair goes through a copy of the input. An
    // empty tensor may have no address, and NULL buffers are a helper's: a byte of our own stands in.
    if (in.numel() > 0 && in.data_ptr() == out.data_ptr()) in = in.clone();
    char noIn = 0, noOut = 0;
    void* sb = in.numel() > 0 ? in.data_ptr() : &noIn;
    void* rb = out.numel() > 0 ? out.data_ptr() : &noOut;
    relayLayout_t L = layout();
    check(relayAllToAllv(sb, sc.data(), sd.data(), rb, rc.data(), rd.data(), relayUint8, &L, cur_, stream_));
  }

  // gather (isGather) or scatter over the whole group, root's list of size_ blocks of `mine`'s size
  // (c10d's contract: every rank's tensor has the same size). A root whose list breaks it rejects the call
  // through the C core (relayCallReject), so the peers fail too instead of waiting out the deadline.
  void rooted(bool isGather, int root, std::vector<at::Tensor>& list, at::Tensor& mine) {
    size_t n = bytesOf(mine);
    std::vector<size_t> counts(size_, n);
    relayCollective_t coll = isGather ? relayCollectiveGather : relayCollectiveScatter;
    relayLayout_t L = layout();
    at::Tensor flat;
    if (rank_ == root) {
      std::string bad;
      if (list.size() != static_cast<size_t>(size_))
        bad = "the root's list has " + std::to_string(list.size()) + " tensors, not " + std::to_string(size_);
      for (size_t i = 0; bad.empty() && i < list.size(); i++)
        if (bytesOf(list[i]) != n || list[i].scalar_type() != mine.scalar_type())
          bad = "the root's tensor " + std::to_string(i) + " differs from this rank's in size or dtype";
      if (!bad.empty())
        check(
            relayCallReject(coll, counts.data(), relayUint8, relaySum, &L, root, bad.c_str(), cur_, stream_));
      flat = isGather ? at::empty({static_cast<int64_t>(n) * size_}, mine.options().dtype(at::kByte))
                      : at::cat(flatViews(list)).view(at::kByte);
    }
    at::Tensor d = dense(mine);
    if (n > 0) {
      void* rootBuf = rank_ == root ? flat.data_ptr() : nullptr;
      if (isGather)
        check(relayGather(d.data_ptr(), rootBuf, counts.data(), relayUint8, root, ranks_.data(), size_, cur_,
                          stream_));
      else
        check(relayScatter(rootBuf, d.data_ptr(), counts.data(), relayUint8, root, ranks_.data(), size_, cur_,
                           stream_));
    }
    if (!isGather) back(mine, d);
    if (isGather && rank_ == root && n > 0) {
      int64_t b = static_cast<int64_t>(n);
      for (int i = 0; i < size_; i++) list[i].view(-1).view(at::kByte).copy_(flat.narrow(0, i * b, b));
    }
  }

  // abort: relayCommAbort first (it wakes a call in flight on the worker, which then fails; the queued
  // ones fail at once), then the worker ends. Not under mu_: a call in flight holds it. shutdown and the
  // destructor: the queued calls finish, then the comm is destroyed.
  // The CUDA comm is a guest: its abort or destroy leaves NCCL's communicator to torch, and goes first
  // (the communicator must outlive it).
  void release(bool abort) {
    closeP2P(abort);
    if (abort) {
      released_ = true;
      relayComm_t c = comm_.exchange(nullptr);
      if (c) relayCommAbort(c);
      c = cudaComm_.exchange(nullptr);
      if (c) relayCommAbort(c);
      stopWorker();
      return;
    }
    stopWorker();
    std::lock_guard<std::mutex> g(mu_);
    released_ = true;
    relayComm_t c = comm_.exchange(nullptr);
    if (c) relayCommDestroy(c);
    c = cudaComm_.exchange(nullptr);
    if (c) {
      c10::DeviceGuard guard(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cudaDevice_)));
      relayCommDestroy(c);
    }
  }

  // No transfer is deferred past the backend's end: a shutdown starts the ones never waited on (an isend
  // whose peer waits for it; within the comm's deadline), an abort fails them.
  void closeP2P(bool abort) {
    std::vector<P2PQueue::Op> ops;
    {
      std::lock_guard<std::mutex> g(p2p_->mu);
      if (!p2p_->start) return;
      bool onWorker;
      {
        std::lock_guard<std::mutex> q(qmu_);  // the lock order of startP2PLocked: p2p_->mu, then qmu_
        onWorker = std::this_thread::get_id() == worker_.get_id();
      }
      if (!abort && !onWorker) startP2PLocked();
      ops.swap(p2p_->pending);
      p2p_->start = nullptr;
    }
    failP2P(ops);
  }

  c10::intrusive_ptr<c10d::Backend> inner_;
  c10::intrusive_ptr<c10d::Backend> cudaInner_;
  std::atomic<relayComm_t> cudaComm_;
  int cudaDevice_;
  relayComm_t cur_ = nullptr;  // the comm and stream of the call in flight (under mu_)
  void* stream_ = nullptr;
  std::string token_;
  int timeoutMs_;
  bool useRelay_;
  std::vector<int> ranks_;
  std::mutex mu_;  // one relaycc call at a time (relaycc.h: calls on one comm must not race)
  std::atomic<relayComm_t> comm_{nullptr};
  std::atomic<bool> released_{false};
  std::atomic<int> error_{0};  // getError's value (c10d::ErrorType), 0 while none
  const char* curOp_ = "init";
  std::map<std::string, int64_t> served_;  // served(): completed relaycc calls by op name (under mu_)
  std::mutex pendingMu_;
  std::vector<WorkPtr> pending_;
  std::shared_ptr<P2PQueue> p2p_ = std::make_shared<P2PQueue>();  // deferred transfers (see send)
  bool coalescing_ = false;                                       // inside batch_isend_irecv (under p2p_->mu)
  std::vector<WorkPtr> coalescedForwarded_;  // its forwarded transfers' Works (under p2p_->mu)
  std::mutex qmu_;                           // the worker's queue
  std::condition_variable qcv_;
  std::deque<std::function<void()>> queue_;
  uint64_t queued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  auto base = py::module::import("torch._C._distributed_c10d").attr("Backend");
  py::class_<RelayBackend, c10::intrusive_ptr<RelayBackend>>(m, "RelayBackend", base)
      .def(py::init([](py::object inner, int rank, int size, std::string token, int timeoutMs, bool useRelay,
                       py::object cudaInner, uintptr_t cudaComm, int cudaDevice) {
             auto backend = [](py::object o) {
               return o.is_none() ? c10::intrusive_ptr<c10d::Backend>()
                                  : c10::intrusive_ptr<c10d::Backend>::unsafe_reclaim_from_nonowning(
                                        o.cast<c10d::Backend*>());
             };
             return c10::make_intrusive<RelayBackend>(backend(inner), rank, size, std::move(token), timeoutMs,
                                                      useRelay, backend(cudaInner),
                                                      reinterpret_cast<relayComm_t>(cudaComm), cudaDevice);
           }),
           py::arg("inner"), py::arg("rank"), py::arg("size"), py::arg("token"), py::arg("timeout_ms"),
           py::arg("use_relay"), py::arg("cuda_inner") = py::none(), py::arg("cuda_comm") = 0,
           py::arg("cuda_device") = -1)
      .def("abort_relay", &RelayBackend::abortRelay, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("cuda_active", &RelayBackend::cudaActive)
      .def_property_readonly("relay_active", &RelayBackend::relayActive)
      .def_property_readonly("comm_created", &RelayBackend::commCreated)
      .def_property_readonly("served", &RelayBackend::served)
      // The error state by c10d::ErrorType's name on every torch (2.11 binds no get_error for a backend).
      .def_property_readonly("error_state", [](RelayBackend& b) {
        static const char* const kNames[] = {"SUCCESS", "TIMEOUT", "COMM_ERROR", "REMOTE_ERROR"};
        int e = b.errorValue();
        return std::string(e >= 0 && e < 4 ? kNames[e] : "UNKNOWN");
      });
}

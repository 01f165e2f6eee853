"""torch's backend autoload (entry point group "torch.backends", run at the end of `import torch`):
registers the "relaycc" torch.distributed backend. Light and never raising: it imports nothing of relaycc
(the package loads its C library and registers torch ops, which must not happen inside torch's own
import); the creator imports relaycc.torch_backend when a group is created."""


def _create(dist_opts, backend_options=None):
  from relaycc import torch_backend
  return torch_backend._create(dist_opts, backend_options)


def register():
  try:
    import torch.distributed as dist
    if not dist.is_available() or "relaycc" in dist.Backend.backend_list:
      return
    dist.Backend.register_backend("relaycc", _create, extended_api=True, devices=["cpu", "cuda"])
  except Exception:  # autoload must never break `import torch`
    pass

"""ctypes binding of the public C API (include/relaycc.h, include/relaycc_nccl.h) and the error type.

Everything here calls librelaycc.so; nothing re-implements the library. The library is the one next to
this file (the wheel ships it there); RELAYCC_LIBRARY names another one (the in-tree tests point it at the
build folder).
"""
import collections
import ctypes
import os
import re

# torch first: on GPUs librelaycc.so needs libnccl.so.2 (the HIP build: librccl.so.1, a ROCm torch's RCCL),
# and the loader reuses an already-mapped library of that SONAME. Importing torch before loading ours makes
# that torch's own NCCL (its wheel's), whichever of torch and relaycc the user imported first, so that the
# process holds one NCCL (checked at comm creation).
import torch  # noqa: F401

# The C struct layouts and the few #defines ctypes needs (relaycc.h; tests/python/test_api.py checks them
# against the header). The enums' names and values come from the library itself (_enum, below).
RELAY_CONFIG_UNDEF_INT = -2**31
RELAY_CONFIG_MAGIC = 0x72656c61
RELAY_NCCL_UNIQUE_ID_BYTES = 128


class RelayccError(RuntimeError):
  """A relaycc call failed. `code` is the relayResult_t, `message` the library's (or this layer's) text,
  which names the argument, the rank and the step."""

  def __init__(self, code, message):
    self.code = code
    self.message = message
    super().__init__(f"{_result_name(code)}: {message}")


class RelayccArgumentError(RelayccError, ValueError):
  """A bad argument (relayInvalidArgument): a RelayccError that is also a ValueError."""


def error(code, message):
  """The exception for a result code: argument errors are also ValueErrors."""
  cls = RelayccArgumentError if code == INVALID_ARGUMENT else RelayccError
  return cls(code, message)


def bad_argument(message):
  return RelayccArgumentError(INVALID_ARGUMENT, message)


class RelayConfig(ctypes.Structure):
  """relayConfig_t of relaycc.h, field for field."""
  _fields_ = [
      ("size", ctypes.c_size_t),
      ("magic", ctypes.c_uint),
      ("version", ctypes.c_uint),
      ("timeoutMs", ctypes.c_int),
      ("checkMode", ctypes.c_int),
      ("route", ctypes.c_int),
      ("depth", ctypes.c_int),
      ("shmRingBytes", ctypes.c_int),
      ("spinCount", ctypes.c_int),
      ("topo", ctypes.c_char_p),
      ("reject", ctypes.c_char_p),
  ]


class RelayLayout(ctypes.Structure):
  _fields_ = [("nGroups", ctypes.c_int), ("nActive", ctypes.c_int), ("ranks", ctypes.POINTER(ctypes.c_int))]


class RelayCollectiveInfo(ctypes.Structure):
  """relayCollectiveInfo_t (relaycc.h)."""
  _fields_ = [("name", ctypes.c_char_p), ("call", ctypes.c_char_p), ("kind", ctypes.c_int),
              ("reduces", ctypes.c_int), ("sendBlocks", ctypes.c_int), ("recvBlocks", ctypes.c_int),
              ("ncclName", ctypes.c_char_p), ("torchcommsName", ctypes.c_char_p)]


# One collective's facts as the package uses them; kind is relayCollectiveKind_t's identifier.
CollectiveInfo = collections.namedtuple("CollectiveInfo",
                                        "name call kind reduces send_blocks recv_blocks nccl_name torchcomms_name")


class RelayNcclUniqueId(ctypes.Structure):
  _fields_ = [("internal", ctypes.c_char * RELAY_NCCL_UNIQUE_ID_BYTES)]


def library_path():
  env = os.environ.get("RELAYCC_LIBRARY")
  if env:
    return env
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), "librelaycc.so")


def _load():
  path = library_path()
  if not os.path.exists(path):
    raise ImportError(
        f"relaycc: the C library {path} does not exist (pip install . ships it inside the package; "
        "RELAYCC_LIBRARY names another one)")
  try:
    lib = ctypes.CDLL(path)
  except OSError as e:
    raise ImportError(f"relaycc: cannot load {path}: {e}") from e
  P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)
  R = ctypes.c_int
  sigs = {
      "relayGetErrorString": (ctypes.c_char_p, [R]),
      "relayGetLastError": (ctypes.c_char_p, [P]),
      "relayGetVersion": (R, [ctypes.POINTER(I)]),
      "relayGetEnumName": (ctypes.c_char_p, [I, I]),
      "relayGetCollectiveInfo": (R, [I, ctypes.POINTER(RelayCollectiveInfo)]),
      "relayCommInitShm": (R, [ctypes.POINTER(P), I, I, ctypes.c_char_p,
                               ctypes.POINTER(RelayConfig)]),
      "relayCommDestroy": (R, [P]),
      "relayCommAbort": (R, [P]),
      "relayCommCount": (R, [P, ctypes.POINTER(I)]),
      "relayCommUserRank": (R, [P, ctypes.POINTER(I)]),
      "relayCallReject": (R, [I, S, I, I, ctypes.POINTER(RelayLayout), I, ctypes.c_char_p, P, P]),
  }
  for name, (res, args) in sigs.items():
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = res, args
  # The NCCL transport's entry points exist only in a library built with CUDA and NCCL.
  optional = {
      "relayCommInitNccl": (R, [ctypes.POINTER(P), P, ctypes.POINTER(RelayConfig)]),
      "relayNcclGetUniqueId": (R, [ctypes.POINTER(RelayNcclUniqueId)]),
      "relayCommInitNcclRank":
          (R, [ctypes.POINTER(P), I,
               ctypes.POINTER(RelayNcclUniqueId), I, I,
               ctypes.POINTER(RelayConfig)]),
  }
  for name, (res, args) in optional.items():
    fn = getattr(lib, name, None)
    if fn is not None:
      fn.restype, fn.argtypes = res, args
  return lib


lib = _load()


def _enum(which):
  """{identifier: value} of one public enum, read from the library (relayGetEnumName)."""
  out = {}
  while True:
    name = lib.relayGetEnumName(which, len(out))
    if name is None:
      return out
    out[name.decode()] = len(out)


def _snake(camel):
  return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


# Enum 0 is the enum of enums: which number reads which enum.
ENUMS = {name[len("relayEnum"):]: v for name, v in _enum(0).items()}
# relayResult_t: RESULTS["INVALID_ARGUMENT"] == 4, and each as a module constant (_lib.INVALID_ARGUMENT).
RESULTS = {_snake(n[len("relay"):]).upper(): v for n, v in _enum(ENUMS["Result"]).items()}
globals().update(RESULTS)
# relayDataType_t by torch dtype ("relayFloat16" is torch.float16); torch < 2.3 lacks the unsigned ones.
DTYPES = {
    getattr(torch, n[len("relay"):].lower()): v
    for n, v in _enum(ENUMS["DataType"]).items()
    if hasattr(torch, n[len("relay"):].lower())
}
# relayRedOp_t ("sum", ...), relayRoute_t (RELAYCC_ROUTE's spelling: "auto", ..., "bw"), relayCollective_t
# ("all_reduce", ...).
OPS = {n[len("relay"):].lower(): v for n, v in _enum(ENUMS["RedOp"]).items()}
ROUTES = {n[len("relayRoute"):].lower(): v for n, v in _enum(ENUMS["Route"]).items()}
COLLECTIVES = {_snake(n[len("relayCollective"):]): v for n, v in _enum(ENUMS["Collective"]).items()}
KINDS = {n: v for n, v in _enum(ENUMS["CollectiveKind"]).items()}


def _coll_info(value):
  info = RelayCollectiveInfo()
  if lib.relayGetCollectiveInfo(value, ctypes.byref(info)) != 0:
    raise RuntimeError(f"relayGetCollectiveInfo({value}) failed")
  return info


# Each collective's facts from the library's table of collectives (its kind, whether it reduces, its
# names in NCCL and torchcomms), never a copy: {"all_reduce": CollectiveInfo(...), ...}.
COLLECTIVE_INFO = {}
for _name, _v in COLLECTIVES.items():
  _i = _coll_info(_v)
  COLLECTIVE_INFO[_name] = CollectiveInfo(
      _i.name.decode(), _i.call.decode(), {v: k for k, v in KINDS.items()}[_i.kind], bool(_i.reduces),
      bool(_i.sendBlocks), bool(_i.recvBlocks),
      _i.ncclName.decode() if _i.ncclName else None,
      _i.torchcommsName.decode() if _i.torchcommsName else None)

# Each collective's C function, its arguments as its kind and its row say (relaycc.h): a rank-set call
# takes (send, recv, counts, dtype, root, ranks, nRanks, comm, stream), a layout call (send, recv, counts,
# dtype, [op,] layout, comm, stream), one with a root position (send, recv, counts, dtype, [op,] rootIndex,
# layout, comm, stream), op where it reduces; point-to-point (buff, count, dtype, peer, comm, stream); the
# per-peer all-to-all-v its arrays and one group's layout.
_P, _I, _S = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)
for _i in COLLECTIVE_INFO.values():
  _fn = getattr(lib, _i.call)
  _fn.restype = ctypes.c_int
  if _i.kind == "relayKindRootedRank":
    _fn.argtypes = [_P, _P, _S, _I, _I, ctypes.POINTER(_I), _I, _P, _P]
  elif _i.kind == "relayKindPointToPoint":  # (buff, count, dtype, peer, comm, stream)
    _fn.argtypes = [_P, ctypes.c_size_t, _I, _I, _P, _P]
  elif _i.kind == "relayKindPerPeer":  # (send, sendcounts, sdispls, recv, recvcounts, rdispls, dtype, layout, ...)
    _fn.argtypes = [_P, _S, _S, _P, _S, _S, _I, ctypes.POINTER(RelayLayout), _P, _P]
  else:
    _root = [_I] if _i.kind == "relayKindRootedPosition" else []
    _op = [_I] if _i.reduces else []
    _fn.argtypes = [_P, _P, _S, _I] + _op + _root + [ctypes.POINTER(RelayLayout), _P, _P]
lib.relayBarrier.restype = ctypes.c_int
lib.relayBarrier.argtypes = [_P, _P]


def _result_name(code):
  s = lib.relayGetErrorString(code) if 0 <= code < len(RESULTS) else None
  return s.decode() if s else f"relayResult_t {code}"


def has_nccl():
  return all(hasattr(lib, f) for f in ("relayNcclGetUniqueId", "relayCommInitNcclRank", "relayCommInitNccl"))


def check(res, comm=None, what=""):
  """Raise the RelayccError of a non-success result, with relayGetLastError's text."""
  if res == SUCCESS:
    return
  text = lib.relayGetLastError(comm)  # NULL: the last error of an init on this thread
  text = text.decode(errors="replace") if text else ""
  raise error(res, text or f"{what} returned {_result_name(res)}")


def version():
  v = ctypes.c_int()
  check(lib.relayGetVersion(ctypes.byref(v)), what="relayGetVersion")
  return v.value

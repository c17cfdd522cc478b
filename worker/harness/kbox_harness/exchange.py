"""A pickle-free file format for tensors passed from the candidate's process to
the judge.

Whatever the candidate's process writes may have been shaped by the candidate,
so the judge must never unpickle it (torch.load, pickle, numpy allow_pickle
all run code). This format holds only a JSON header and raw bytes, and load()
checks every field before it touches the data.

Layout (all integers little-endian; data is in native order, and every machine
kbox runs on is little-endian):

    b"KBOXTNS1" | uint64 header length H | H bytes of UTF-8 JSON header |
    zero padding to the next multiple of 64 (the data section's start) |
    tensor data, each tensor at an offset (relative to the data section)
    that is a multiple of 64; the file ends where the last tensor ends.

Header: {"tree": NODE, "tensors": [{"dtype", "shape", "offset", "nbytes"}]}.
NODE is null, true/false, a JSON integer, {"float": float.hex(x)} (exact,
and NaN/inf need no JSON extension), {"tensor": i}, {"list": [NODE...]},
{"tuple": [NODE...]} or {"dict": [[key, NODE]...]} (pairs keep order and
let us reject duplicate keys). Every tensor entry is referenced exactly once.

Speed, 100 MiB float32 tensor: 2-core VM, ext4, torch 1.13: save ~0.07-0.15 s,
load ~0.08 s; H100 host, torch 2.11: save 0.05-0.12 s, load 0.09-0.11 s, load
to cuda 0.10-0.12 s. save() writes straight from the tensor's memory; load()
is one read into a bytearray and torch.frombuffer views of it (no second
copy, no per-element Python work).
"""
import errno
import fcntl
import json
import mmap
import os
import resource
import stat
import struct
import tempfile
import time

import torch

MAGIC = b"KBOXTNS1"
ALIGN = 64
MAX_HEADER_BYTES = 16 << 20
MAX_DEPTH = 32  # containers nested deeper than this are refused
MAX_DIMS = 64
DEFAULT_MAX_BYTES = 8 << 30
_MAX_SIZE = 1 << 62

_PREFIX = struct.Struct("<8sQ")

# name -> (dtype, dtype the bytes are stored/read as). bfloat16 goes through
# int16 so that neither side depends on frombuffer/copy support for it.
_DTYPES = {
    "float16": (torch.float16, torch.float16),
    "float32": (torch.float32, torch.float32),
    "float64": (torch.float64, torch.float64),
    "bfloat16": (torch.bfloat16, torch.int16),
    "int8": (torch.int8, torch.int8),
    "int16": (torch.int16, torch.int16),
    "int32": (torch.int32, torch.int32),
    "int64": (torch.int64, torch.int64),
    "uint8": (torch.uint8, torch.uint8),
    "bool": (torch.bool, torch.bool),
    "complex64": (torch.complex64, torch.complex64),
    "complex128": (torch.complex128, torch.complex128),
}
_NAMES = {dt: name for name, (dt, _) in _DTYPES.items()}
_ITEMSIZE = {name: torch.empty(0, dtype=dt).element_size() for name, (dt, _) in _DTYPES.items()}


class FormatError(ValueError):
    """The file is not a well-formed exchange file."""


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


# ---------------------------------------------------------------- writing

def _encode(obj, tensors, depth):
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return int(obj)  # int subclasses (IntEnum) become plain ints
    if isinstance(obj, float):
        return {"float": float(obj).hex()}
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return {"tensor": len(tensors) - 1}
    if isinstance(obj, (list, tuple, dict)):
        if depth >= MAX_DEPTH:
            raise ValueError("exchange: containers nested deeper than %d" % MAX_DEPTH)
        if isinstance(obj, dict):
            items = []
            for k, v in obj.items():
                if not isinstance(k, str):
                    raise TypeError("exchange: dict key %r is not a str" % (k,))
                items.append([k, _encode(v, tensors, depth + 1)])
            return {"dict": items}
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {kind: [_encode(v, tensors, depth + 1) for v in obj]}
    raise TypeError("exchange: cannot store a %s" % type(obj).__name__)


# Transfers up to this size go through pinned memory. Its allocator keeps
# freed blocks (rounded up to a power of two) for reuse until the process
# ends, so pinning is paid once per size; larger transfers, bound by
# bandwidth either way, stay in pageable memory the stage gives back.
PINNED_MAX_BYTES = 256 << 20


def _pinned(shape, dtype):
    """Page-locked host memory from torch's caching host allocator, or None
    where there is none (no CUDA, too large, or the allocation failed)."""
    numel = 1
    for d in shape:
        numel *= d
    if numel * _ITEMSIZE[_NAMES[dtype]] > PINNED_MAX_BYTES or not torch.cuda.is_available():
        return None
    try:
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    except RuntimeError:
        return None


def _to_host(t):
    """t on the CPU. A GPU tensor is copied into pinned memory: a direct DMA,
    where .to("cpu") goes through the driver's staging buffer into freshly
    faulted pageable memory (docs/benchmarks.md, the run stage's exchange)."""
    if t.device.type == "cuda":
        host = _pinned(t.shape, t.dtype)
        if host is not None:
            host.copy_(t)
            return host
    return t.to("cpu")


def _dense(t):
    """t's values as a dense contiguous tensor on its device."""
    t = t.detach()
    if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
        raise TypeError("exchange: only dense tensors with data can be stored (got %s, %s)"
                        % (t.layout, t.device))
    if t.dtype not in _NAMES:
        raise TypeError("exchange: unsupported dtype %s" % t.dtype)
    # Lazy conjugate/negative views are resolved first, so that the copy
    # holds the values and not the un-conjugated bytes.
    for resolve in ("resolve_conj", "resolve_neg"):
        if hasattr(t, resolve):
            t = getattr(t, resolve)()
    return t.contiguous()


def _cpu_dense(t):
    return _to_host(_dense(t)).contiguous()


def _write_tensor(f, t, storage_dtype):
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return
    flat = t.reshape(-1)
    if flat.dtype != storage_dtype:
        flat = flat.view(storage_dtype)
    try:
        # Zero-copy: write straight from the tensor's memory.
        buf = memoryview(flat.numpy()).cast("B")
    except (ImportError, RuntimeError, TypeError):  # torch built without numpy
        buf = bytearray(nbytes)
        torch.frombuffer(buf, dtype=storage_dtype).copy_(flat)
    f.write(buf)


def _layout_of(obj, dense):
    """(tensors made dense by `dense`, their header entries, the header's
    bytes) of obj in save()'s layout."""
    tensors = []
    tree = _encode(obj, tensors, 0)
    tensors = [dense(t) for t in tensors]
    entries, offset = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        entries.append({"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "offset": offset, "nbytes": nbytes})
        offset = _align(offset + nbytes)
    header = json.dumps({"tree": tree, "tensors": entries}, allow_nan=False,
                        separators=(",", ":")).encode("utf-8")
    if len(header) > MAX_HEADER_BYTES:
        raise ValueError("exchange: header of %d bytes exceeds %d"
                         % (len(header), MAX_HEADER_BYTES))
    return tensors, entries, header


def save(path, obj):
    """Writes obj (tensors, bool/int/float/None, nested list/tuple/dict with
    str keys) to path, atomically: readers see the old file or the new one."""
    tensors, entries, header = _layout_of(obj, _cpu_dense)

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        # mkstemp makes the file 0600; the reader may run as another user.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(_PREFIX.pack(MAGIC, len(header)))
            f.write(header)
            pos = _align(_PREFIX.size + len(header))
            f.write(b"\0" * (pos - _PREFIX.size - len(header)))
            data_start = pos
            for t, e in zip(tensors, entries):
                f.write(b"\0" * (data_start + e["offset"] - pos))
                _write_tensor(f, t, _DTYPES[e["dtype"]][1])
                pos = data_start + e["offset"] + e["nbytes"]
        # No fsync: the file only has to outlive the writer, not a power cut.
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ---------------------------------------------------------------- the arena

class Arena(object):
    """Shared memory for outputs that the candidate's process writes and the
    judge reads, in save()'s layout, without a file: one output at a time,
    at offset 0 (docs/exchange-arena.md).

    Through a file each output was copied three times on the host (into
    pinned memory, into tmpfs, out of it) and its tmpfs pages allocated and
    freed; here the writer copies a GPU tensor straight into the arena and
    the judge copies it straight to its device: with the arena pinned in
    both processes (cudaHostRegister) both are DMA.

    The judge makes it (create) before it forks the candidate's process,
    which inherits the descriptor: a sealed memfd whose size neither side
    can change, so a mapping can never lose its pages under the judge (a
    truncated file would be a SIGBUS). The candidate's process can write the
    arena at any time; the judge therefore copies what it checks and uses
    (load_from_arena): whatever a concurrent write does, the judge judges
    one set of bytes, which the candidate could have written anyway."""

    def __init__(self, fd, capacity):
        self.fd = fd
        self.capacity = capacity
        self._map = mmap.mmap(fd, capacity, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.bytes = torch.frombuffer(self._map, dtype=torch.uint8)  # a view: no copy
        self._pinned = 0
        self.pin_failed = False  # cudaHostRegister refused: copies use staging buffers
        self.pin_ms = 0.0  # time spent pinning in this process (phase_ms)

    @classmethod
    def create(cls, capacity, name="kbox-exchange"):
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            try:
                os.ftruncate(fd, capacity)
            except OSError as e:
                if e.errno != errno.EFBIG:
                    raise
                # The stage's RLIMIT_FSIZE (worker/stage_runner.cc) bounds
                # what can cross between judge and candidate.
                raise OSError(errno.EFBIG, "%d bytes cannot cross between the judge and the "
                              "candidate's process: over the stage's file size limit"
                              % capacity)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            return cls(fd, capacity)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def receive(cls, fd, max_bytes):
        """The arena another process made (create) and passed as `fd` (over
        the crossing socket, docs/judge-boundary.md): a memfd it can no
        longer shrink, so that a mapping can never lose its pages under this
        process (a SIGBUS). Takes the descriptor; FormatError otherwise."""
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            size = os.fstat(fd).st_size
        except OSError as e:
            os.close(fd)
            raise FormatError("a crossing that is not a memfd: %s" % e)
        if not seals & fcntl.F_SEAL_SHRINK or not seals & fcntl.F_SEAL_SEAL:
            os.close(fd)
            raise FormatError("a crossing whose memfd may still shrink")
        if not 0 < size <= max_bytes + MAX_HEADER_BYTES + ALIGN:
            os.close(fd)
            raise FormatError("a crossing of %d bytes" % size)
        try:
            return cls(fd, size)
        except (OSError, ValueError) as e:
            os.close(fd)
            raise FormatError("a crossing that cannot be mapped: %s" % e)

    def unpin(self):
        """Gives back what pin() locked."""
        if self._pinned and torch.cuda.is_available():
            try:
                torch.cuda.cudart().cudaHostUnregister(self.bytes.data_ptr())
            except (AttributeError, RuntimeError, TypeError):
                pass
        self._pinned = 0

    def close(self):
        """Unmaps and closes (a crossing's arena, once read or sent)."""
        self.unpin()
        self.bytes = None
        try:
            self._map.close()
        except (BufferError, ValueError):
            pass  # a view is still alive: the mapping goes with it
        try:
            os.close(self.fd)
        except OSError:
            pass

    def pin(self, nbytes):
        """Page-locks the first nbytes (rounded up to a power of two, at
        least 1 MiB) for the GPU's DMA, once per size in each process; no-op
        without CUDA, over PINNED_MAX_BYTES (as for files: locked memory
        stays locked until the stage ends) or once pinning failed (copies
        then go through the driver's staging buffer: slower, the same
        bytes)."""
        if nbytes <= self._pinned or self.pin_failed or not torch.cuda.is_available():
            return
        if nbytes > PINNED_MAX_BYTES:
            # A copy may not straddle the end of a registered range: CUDA
            # refuses it ("invalid argument"). One larger than what may stay
            # locked runs wholly in pageable memory.
            self.unpin()
            return
        size = 1 << 20
        while size < nbytes:
            size <<= 1
        size = min(size, self.capacity)
        t0 = time.perf_counter()
        try:
            cudart = torch.cuda.cudart()
            ptr = self.bytes.data_ptr()
            self.unpin()
            if int(cudart.cudaHostRegister(ptr, size, 0)) != 0:
                self.pin_failed = True
                return
            self._pinned = size
        except (AttributeError, RuntimeError, TypeError):
            self.pin_failed = True
        finally:
            self.pin_ms += (time.perf_counter() - t0) * 1e3


def save_to_arena(arena, obj):
    """Writes obj into the arena in save()'s layout; its size in bytes, or
    None when it does not fit (nothing written: the caller uses a file)."""
    # Dense and contiguous where they are: a GPU tensor goes to the arena
    # in one copy, not through host memory first.
    tensors, entries, header = _layout_of(obj, _dense)
    data_start = _align(_PREFIX.size + len(header))
    size = data_start
    if entries:
        size += entries[-1]["offset"] + entries[-1]["nbytes"]
    if size > arena.capacity:
        return None
    arena.pin(size)
    head = _PREFIX.pack(MAGIC, len(header)) + header
    arena._map[0:data_start] = head + b"\0" * (data_start - len(head))
    for t, e in zip(tensors, entries):
        if not e["nbytes"]:
            continue
        storage_dtype = _DTYPES[e["dtype"]][1]
        start = data_start + e["offset"]
        dst = arena.bytes[start:start + e["nbytes"]].view(storage_dtype)
        src = t.reshape(-1)
        if src.dtype != storage_dtype:
            src = src.view(storage_dtype)
        dst.copy_(src)
    return size


def layout_bytes(obj):
    """The bytes save_to_arena needs for obj."""
    tensors, entries, header = _layout_of(obj, _dense)
    size = _align(_PREFIX.size + len(header))
    if entries:
        size += entries[-1]["offset"] + entries[-1]["nbytes"]
    return size


class TooLarge(Exception):
    """What kbox cannot carry between the judge and the candidate's process."""


# Read once, at import: the run stage's strict seccomp filter kills
# prlimit64, which getrlimit is, and nothing may change the limit later.
_FSIZE_SOFT = resource.getrlimit(resource.RLIMIT_FSIZE)[0]


def crossing_limit():
    """The most bytes one crossing of this process can hold: a memfd is a
    file, bound by RLIMIT_FSIZE (the stage's, which the candidate's process
    inherits); None when unbounded."""
    return None if _FSIZE_SOFT == resource.RLIM_INFINITY else _FSIZE_SOFT


def save_to_memfd(obj, name="kbox-crossing"):
    """(Arena, bytes) holding obj in save()'s layout: a fresh sealed memfd
    of its size, for what does not fit the stage's arenas. The caller sends
    arena.fd over the crossing socket and then closes the arena."""
    arena = Arena.create(max(layout_bytes(obj), ALIGN), name)
    try:
        n = save_to_arena(arena, obj)
        if n is None:
            raise ValueError("exchange: the object grew while it was written")
        return arena, n
    except BaseException:
        arena.close()
        raise


def load_from_arena(arena, nbytes, device=None, max_bytes=DEFAULT_MAX_BYTES):
    """The object save_to_arena wrote, nbytes long (as the writer reports
    it: checked like everything else). Tensors are copies, on `device` or
    the CPU, that the writer can no longer change."""
    if not _is_size(nbytes) or nbytes > arena.capacity:
        raise FormatError("arena output of %s bytes, the arena holds %d"
                          % (_short(nbytes), arena.capacity))
    if nbytes > max_bytes:
        raise FormatError("output is %d bytes, over the limit of %d" % (nbytes, max_bytes))
    if device is not None and torch.device(device).type == "cuda":
        arena.pin(nbytes)
    header, data_start = _layout(lambda lo, hi: bytes(arena._map[lo:hi]), nbytes, "arena output")
    return _build(header, data_start, arena.bytes, device, private=False)


# ---------------------------------------------------------------- reading

def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise FormatError("duplicate key %s in header" % _short(k))
        d[k] = v
    return d


def _bad_constant(name):
    raise FormatError("non-standard JSON constant %s in header" % name)


def _bad_float(text):
    # Floats are stored as {"float": hex}; a bare JSON number with a fraction
    # or exponent is never written by save().
    raise FormatError("bare JSON float %s in header" % _short(text))


def _short(x):
    # Hostile values can be megabytes long; error messages stay one line.
    try:
        r = repr(x)
    except ValueError:  # ints past Python's str-conversion digit limit
        return "<%s too large to print>" % type(x).__name__
    return r if len(r) <= 80 else r[:77] + "..."


def _is_size(x):
    # bool is an int subclass, but JSON true is not a size; the bound keeps
    # products and messages small.
    return type(x) is int and 0 <= x < _MAX_SIZE


def _parse_header(raw):
    try:
        text = raw.decode("utf-8")
        header = json.loads(text, object_pairs_hook=_no_duplicates,
                            parse_constant=_bad_constant, parse_float=_bad_float)
    except FormatError:
        raise
    except RecursionError:
        raise FormatError("header JSON nested too deeply")
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise FormatError("header is not valid UTF-8 JSON: %s" % e)
    if not isinstance(header, dict):
        raise FormatError("header is a %s, not an object" % type(header).__name__)
    if set(header) != {"tree", "tensors"}:
        raise FormatError("header keys %s, expected tree and tensors" % _short(sorted(header)))
    if not isinstance(header["tensors"], list):
        raise FormatError("header 'tensors' is not a list")
    return header


def _check_entry(i, e, data_len):
    if not isinstance(e, dict) or set(e) != {"dtype", "shape", "offset", "nbytes"}:
        raise FormatError("tensor %d: entry must have exactly dtype, shape, offset, nbytes" % i)
    name, shape, offset, nbytes = e["dtype"], e["shape"], e["offset"], e["nbytes"]
    if not isinstance(name, str) or name not in _DTYPES:
        raise FormatError("tensor %d: dtype %s not allowed" % (i, _short(name)))
    if not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise FormatError("tensor %d: shape must be a list of at most %d dims" % (i, MAX_DIMS))
    numel = extent = 1
    for d in shape:
        if not _is_size(d):
            raise FormatError("tensor %d: shape %s has a dim that is not a non-negative int"
                              % (i, _short(shape)))
        numel *= d
        # torch refuses shapes whose non-zero dims overflow int64, even when
        # another dim is 0 (no data); refuse them here, as FormatError.
        extent *= max(d, 1)
        if extent >= _MAX_SIZE:
            raise FormatError("tensor %d: shape %s is too large" % (i, _short(shape)))
    if not _is_size(nbytes) or nbytes != numel * _ITEMSIZE[name]:
        raise FormatError("tensor %d: nbytes %s != %d elements * %d bytes"
                          % (i, _short(nbytes), numel, _ITEMSIZE[name]))
    if not _is_size(offset) or offset % ALIGN:
        raise FormatError("tensor %d: offset %s is not a non-negative multiple of %d"
                          % (i, _short(offset), ALIGN))
    if offset + nbytes > data_len:
        raise FormatError("tensor %d: bytes [%d, %d) run past the data section's %d bytes"
                          % (i, offset, offset + nbytes, data_len))


def _check_layout(entries, data_len):
    spans = sorted((e["offset"], e["offset"] + e["nbytes"], i)
                   for i, e in enumerate(entries) if e["nbytes"])
    end = 0
    for lo, hi, i in spans:
        if lo < end:
            raise FormatError("tensor %d: bytes [%d, %d) overlap another tensor" % (i, lo, hi))
        end = hi
    # Canonical files end with the last tensor: trailing bytes mean the
    # writer was not save() (or the file was appended to).
    if end != data_len:
        raise FormatError("%d trailing bytes after the last tensor" % (data_len - end))


def _file_buffer(size, pinned):
    """(writable memoryview of `size` bytes, uint8 tensor over the same
    memory or None). Pinned: page-locked memory, so that the copy to the GPU
    that follows is a direct DMA; else a bytearray."""
    if pinned and size:
        host = _pinned((size,), torch.uint8)
        if host is not None:
            try:
                return memoryview(host.numpy()).cast("B"), host
            except (ImportError, RuntimeError, TypeError):  # torch built without numpy
                pass
    return memoryview(bytearray(size)), None


def _read_file(path, max_bytes, pinned=False):
    """The file's bytes as (memoryview, uint8 tensor over them or None)."""
    # O_NONBLOCK: a FIFO planted at path must not hang the judge; it is then
    # refused as not a regular file.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError("%s is not a regular file" % path)
        if st.st_size > max_bytes:
            raise FormatError("file is %d bytes, over the limit of %d" % (st.st_size, max_bytes))
        view, base = _file_buffer(st.st_size, pinned)
        got = 0
        while got < len(view):
            n = f.readinto(view[got:])
            if not n:
                break
            got += n
        if got != len(view) or f.read(1):
            raise FormatError("file changed size while being read")
    return view, base


def _decode(node, tensors, used, depth):
    if node is None or isinstance(node, bool) or type(node) is int:
        return node
    if not isinstance(node, dict) or len(node) != 1:
        raise FormatError("tree node %s is not a valid node" % _short(node))
    (kind, value), = node.items()
    if kind == "float":
        if not isinstance(value, str):
            raise FormatError("float node holds %s, not a hex string" % _short(value))
        try:
            return float.fromhex(value)
        except (ValueError, OverflowError):
            raise FormatError("float node %s is not a float.hex() string" % _short(value))
    if kind == "tensor":
        if not (type(value) is int and 0 <= value < len(tensors)):
            raise FormatError("tree refers to tensor %s; the file has %d"
                              % (_short(value), len(tensors)))
        if used[value]:
            raise FormatError("tree refers to tensor %d twice" % value)
        used[value] = True
        return tensors[value]
    if kind not in ("list", "tuple", "dict"):
        raise FormatError("unknown tree node kind %s" % _short(kind))
    if depth >= MAX_DEPTH:
        raise FormatError("tree nested deeper than %d" % MAX_DEPTH)
    if not isinstance(value, list):
        raise FormatError("%s node does not hold a list" % kind)
    if kind == "dict":
        out = {}
        for pair in value:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise FormatError("dict item %s is not a [str, node] pair" % _short(pair))
            if pair[0] in out:
                raise FormatError("dict key %s appears twice" % _short(pair[0]))
            out[pair[0]] = _decode(pair[1], tensors, used, depth + 1)
        return out
    items = [_decode(v, tensors, used, depth + 1) for v in value]
    return tuple(items) if kind == "tuple" else items


def load(path, device=None, max_bytes=DEFAULT_MAX_BYTES):
    """Reads a file written by save(). Raises FormatError on anything
    malformed. CPU tensors share one buffer holding the file (views, no copy;
    they cannot be resized); with device set they are copied there."""
    to_gpu = device is not None and torch.device(device).type == "cuda"
    buf, base = _read_file(path, max_bytes, pinned=to_gpu)
    header, data_start = _layout(lambda lo, hi: bytes(buf[lo:hi]), len(buf), "file")
    if base is None and any(e["nbytes"] for e in header["tensors"]):
        base = torch.frombuffer(buf, dtype=torch.uint8)  # a view: no copy
    return _build(header, data_start, base, device, private=True)


def _layout(read, size, what):
    """(header, data section's start) of `size` bytes in save()'s layout,
    every field checked. read(lo, hi) gives bytes [lo, hi) as a private
    copy: what the checks see is what the caller then uses, even where the
    writer can still change the bytes (the arena)."""
    if size < _PREFIX.size:
        raise FormatError("%s is %d bytes, shorter than the %d-byte prefix"
                          % (what, size, _PREFIX.size))
    magic, hlen = _PREFIX.unpack(read(0, _PREFIX.size))
    if magic != MAGIC:
        raise FormatError("bad magic %r" % bytes(magic))
    if hlen > MAX_HEADER_BYTES:
        raise FormatError("header length %d exceeds %d" % (hlen, MAX_HEADER_BYTES))
    if _PREFIX.size + hlen > size:
        raise FormatError("header of %d bytes is truncated (%s is %d bytes)" % (hlen, what, size))
    header = _parse_header(read(_PREFIX.size, _PREFIX.size + hlen))
    data_start = _align(_PREFIX.size + hlen)
    if data_start > size:
        raise FormatError("%s ends inside the header padding" % what)
    data_len = size - data_start
    entries = header["tensors"]
    for i, e in enumerate(entries):
        _check_entry(i, e, data_len)
    _check_layout(entries, data_len)
    return header, data_start


def _build(header, data_start, base, device, private):
    """The object the checked header describes, its tensors over `base` (a
    uint8 tensor of the whole buffer). private=False: base is memory another
    process can still write (the arena), so every tensor is copied out
    before anything looks at its values."""
    tensors = []
    for i, e in enumerate(header["tensors"]):
        dtype, storage_dtype = _DTYPES[e["dtype"]]
        start = data_start + e["offset"]
        if e["nbytes"] == 0:
            t = torch.empty(e["shape"], dtype=dtype)
            if device is not None:
                t = t.to(device)
        else:
            raw = base[start:start + e["nbytes"]]
            if device is not None and torch.device(device).type != "cpu":
                raw = raw.to(device)
            elif not private:
                raw = raw.clone()  # .to("cpu") would return the shared view itself
            if dtype == torch.bool:
                # Bytes other than 0/1 in a bool tensor are undefined behaviour
                # in torch's kernels.
                if bool((raw > 1).any()):
                    raise FormatError("tensor %d: bool data holds bytes other than 0 and 1" % i)
            # Offsets are multiples of ALIGN from a 64-byte aligned data
            # section, so every view is aligned for its dtype.
            t = raw.view(storage_dtype)
            if storage_dtype != dtype:
                t = t.view(dtype)
            t = t.reshape(e["shape"])
        tensors.append(t)
    used = [False] * len(tensors)
    obj = _decode(header["tree"], tensors, used, 0)
    if not all(used):
        raise FormatError("tensor %d is not referenced by the tree" % used.index(False))
    return obj


def tensors(obj):
    """The tensors in obj, in the order save() stores them."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    out = []
    if isinstance(obj, dict):
        for v in obj.values():
            out.extend(tensors(v))
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            out.extend(tensors(v))
    return out

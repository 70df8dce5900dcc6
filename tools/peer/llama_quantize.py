# Runs llama.cpp's own llama_model_quantize (the libllama that node-llama-cpp
# installed: @node-llama-cpp/linux-x64 3.21.1, llama.cpp release v0.4.0) for the
# quantize peer test. usage: python3 llama_quantize.py BINS IN,OUT,FTYPE ...
# The llama_model_quantize_params layout is that version's include/llama.h; the
# defaults self-check refuses to run if it ever stops matching the library.
# FTYPE may carry flags: FTYPE/pure (every matrix in the file type's own type,
# llama-quantize --pure) and FTYPE/ones (an importance matrix of ones for every
# tensor: the I-quant file types refuse to run without one, and ones weight
# every element alike, i.e. the quantizer's own unweighted error).
import ctypes, struct, sys
D = sys.argv[1] + '/'
ctypes.CDLL(D + 'libggml-base.so', mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL(D + 'libggml.v0.4.0.so', mode=ctypes.RTLD_GLOBAL)
L = ctypes.CDLL(D + 'libllama.v0.4.0.so')
class QP(ctypes.Structure):
    _fields_ = [('nthread', ctypes.c_int32), ('ftype', ctypes.c_int32),
                ('output_tensor_type', ctypes.c_int32), ('token_embedding_type', ctypes.c_int32),
                ('allow_requantize', ctypes.c_bool), ('quantize_output_tensor', ctypes.c_bool),
                ('only_copy', ctypes.c_bool), ('pure', ctypes.c_bool), ('keep_split', ctypes.c_bool),
                ('dry_run', ctypes.c_bool), ('imatrix', ctypes.c_void_p), ('kv_overrides', ctypes.c_void_p),
                ('tt_overrides', ctypes.c_void_p), ('prune_layers', ctypes.c_void_p),
                ('max_buf_size', ctypes.c_size_t)]
LOG = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
quiet = LOG(lambda level, text, ud: None)
L.llama_log_set(quiet, None)
L.llama_backend_init()
L.llama_model_quantize_default_params.restype = QP
p = L.llama_model_quantize_default_params()
# GGML_TYPE_COUNT is 43 in this ggml; LLAMA_FTYPE_MOSTLY_Q8_0 is 7
if not (p.ftype == 7 and p.output_tensor_type == 43 and p.token_embedding_type == 43 and
        not p.allow_requantize and p.quantize_output_tensor and not p.only_copy and not p.pure and
        not p.dry_run and not p.imatrix and p.max_buf_size == 8 << 30):
    sys.exit('llama_quantize: llama_model_quantize_params layout does not match this libllama')
class IM(ctypes.Structure):
    _fields_ = [('name', ctypes.c_char_p), ('data', ctypes.POINTER(ctypes.c_float)), ('size', ctypes.c_size_t)]

def tensor_shapes(path):
    """(name, ne) of every tensor of a GGUF file (the header only)."""
    with open(path, 'rb') as f:
        def rd(fmt):
            return struct.unpack('<' + fmt, f.read(struct.calcsize('<' + fmt)))[0]
        def rstr():
            return f.read(rd('Q')).decode()
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        def skip(t):
            if t == 8: rstr()
            elif t == 9:
                et, n = rd('I'), rd('Q')
                for _ in range(n): skip(et)
            else: f.read(sizes[t])
        if f.read(4) != b'GGUF' or rd('I') != 3: sys.exit('llama_quantize: %s is not a GGUF v3 file' % path)
        n_t, n_kv = rd('Q'), rd('Q')
        for _ in range(n_kv):
            rstr()
            skip(rd('I'))
        out = []
        for _ in range(n_t):
            name = rstr()
            ne = [rd('Q') for _ in range(rd('I'))]
            rd('I'); rd('Q')
            out.append((name, ne))
        return out

def ones_imatrix(path):
    """Entries of ones (ne0 x experts floats, as llama.cpp reads them) for every matrix, NULL-terminated."""
    mats = [(n, ne) for n, ne in tensor_shapes(path) if len(ne) >= 2]
    arr = (IM * (len(mats) + 1))()
    keep = []
    for i, (n, ne) in enumerate(mats):
        k = ne[0] * (ne[2] if len(ne) > 2 else 1)
        buf = (ctypes.c_float * k)(*([1.0] * k))
        keep.append(buf)
        arr[i] = IM(n.encode(), ctypes.cast(buf, ctypes.POINTER(ctypes.c_float)), k)
    arr[len(mats)] = IM(None, None, 0)
    return arr, keep

L.llama_model_quantize.restype = ctypes.c_uint32
L.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QP)]
for job in sys.argv[2:]:
    inp, out, ft = job.rsplit(',', 2)
    flags = ft.split('/')
    p.ftype = int(flags[0])
    p.nthread = 2
    p.pure = 'pure' in flags[1:]
    imatrix = ones_imatrix(inp) if 'ones' in flags[1:] else None
    p.imatrix = ctypes.cast(imatrix[0], ctypes.c_void_p) if imatrix else None
    if L.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p)) != 0:
        sys.exit('llama_quantize: llama_model_quantize failed for ' + job)

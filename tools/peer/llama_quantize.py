# Runs llama.cpp's own llama_model_quantize (the libllama that node-llama-cpp
# installed: @node-llama-cpp/linux-x64 3.21.1, llama.cpp release v0.4.0) for the
# quantize peer test. usage: python3 llama_quantize.py BINS IN,OUT,FTYPE ...
# The llama_model_quantize_params layout is that version's include/llama.h; the
# defaults self-check refuses to run if it ever stops matching the library.
import ctypes, sys
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
L.llama_model_quantize.restype = ctypes.c_uint32
L.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QP)]
for job in sys.argv[2:]:
    inp, out, ft = job.rsplit(',', 2)
    p.ftype = int(ft)
    p.nthread = 2
    if L.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p)) != 0:
        sys.exit('llama_quantize: llama_model_quantize failed for ' + job)

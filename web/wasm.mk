# web/wasm.mk - `make wasm`: the core compiled to WebAssembly for browsers,
# with Debian's emscripten (3.1.6; it needs NODE_PATH to find acorn), into
# web/dist/ next to the JS host (web/src/*.js, copied) and its types.
#
# What goes in: every library source except the native GPU HAL (it dlopens
# Dawn; the browser's is web/src/hal_browser.c + the JS library
# web/src/hal_webgpu.lib.js over navigator.gpu; `make wasm WASM_HAL=none`
# links web/src/hal_none.c instead: no device, `auto` picks the CPU) and the
# x86/ARM SIMD kernel files (src/quant/quant_wasm.c has SIMD128 kernels for the main
# formats, src/quant/repack_wasm.c the products over the interleaved Q4_0/Q8_0
# layout that the CPU backend repacks those matrices into at the first context;
# the other portable kernels run auto-vectorised to SIMD128), plus
# the JS-facing glue web/src/wgllm_web.c.
# Threads: -pthread (the engine has its own thread, the CPU backend a pool),
# so pages must be cross-origin isolated (COOP/COEP headers) for
# SharedArrayBuffer (wgllm-core-st.js and wgllm-core-st-gpu.js, below, serve
# the other pages: CPU, and WebGPU through Asyncify). Memory
# grows up to 4 GiB. For the CPU the model is copied once into the wasm heap by
# web/src/store.js, whose files' mmap hands that block to the core; on WebGPU
# the core reads the files in chunks through wgllm_web.lib.js and uploads them
# to GPU buffers (streamed weights: they never sit in the heap).

EMCC      ?= emcc
EMCC_ENV  := NODE_PATH=/usr/share/nodejs
WASM_OUT  := build/wasm
WASM_HAL  ?= browser
WASM_SRC  := $(filter-out src/backend/webgpu/hal_native.c %_avx2.c %_avx512.c %_amx.c %_neon.c,$(LIB_SRC)) web/src/wgllm_web.c web/src/hal_selftest.c web/src/hal_$(WASM_HAL).c
# The relaxed-SIMD kernel module (src/quant/repack_relaxed.c, for the
# Q4_0 and Q4_K products where the browser has relaxed SIMD): Debian's emscripten (LLVM
# 14) cannot emit it, so web/relaxed.mjs builds it with npm @yowasp/clang (a
# devDependency of web/) into a JS library that every core links.
RELAXED_LIB := build/wasm-relaxed/relaxed.lib.js
WASM_JSLIB := web/src/wgllm_web.lib.js $(RELAXED_LIB) $(if $(filter browser,$(WASM_HAL)),web/src/hal_webgpu.lib.js)
WASM_OBJ  := $(WASM_SRC:%.c=$(WASM_OUT)/%.o)
WASM_CFLAGS := -std=c11 -D_GNU_SOURCE -Iinclude -Isrc $(WARN) -O2 -msimd128 -pthread -MMD -MP
WASM_FUNCS := malloc free wgllm_web_load wgllm_web_unload wgllm_web_last_error wgllm_web_model_info \
  wgllm_web_model_arch wgllm_web_openai wgllm_web_job_answer wgllm_web_embed wgllm_web_job_seq wgllm_web_job_done \
  wgllm_web_job_cancel wgllm_web_job_take wgllm_web_job_num wgllm_web_job_text wgllm_web_job_message \
  wgllm_web_job_vec wgllm_web_job_free wgllm_web_load_start wgllm_web_load_done \
  wgllm_web_load_finish wgllm_web_load_stream_start wgllm_web_load_engine_failed wgllm_web_backend wgllm_web_cpu_features wgllm_web_hal_selftest_start wgllm_web_hal_selftest_done \
  wgllm_web_hal_selftest_report wgllm_web_hal_selftest_free wgllm_web_snapshots wgllm_web_job_blob wgllm_web_route
WASM_COMMA := ,
WASM_EXPORTS := $(subst $() ,$(WASM_COMMA),$(strip $(addprefix _,$(WASM_FUNCS))))
# PTHREAD_POOL_SIZE: workers started with the module, so that no
# pthread_create has to wait for a new Worker to load: up to 4 compute
# threads, the engine thread and a helper per request in flight.
WASM_LDFLAGS := -pthread -O2 -msimd128 -sMODULARIZE=1 -sEXPORT_ES6=1 -sEXPORT_NAME=createWgllmCore \
  -sENVIRONMENT=web,worker -sALLOW_MEMORY_GROWTH=1 -sINITIAL_MEMORY=64MB -sMAXIMUM_MEMORY=4GB \
  -sPTHREAD_POOL_SIZE=8 -sEXPORTED_FUNCTIONS=$(WASM_EXPORTS) -sEXIT_RUNTIME=0 -Wno-pthreads-mem-growth \
  -sEXPORTED_RUNTIME_METHODS=FS,UTF8ToString,stringToUTF8,lengthBytesUTF8 -sFORCE_FILESYSTEM=1 \
  $(addprefix --js-library ,$(WASM_JSLIB))
WEB_JS := $(filter-out %.lib.js,$(wildcard web/src/*.js web/src/*.d.ts))

.PHONY: wasm
wasm: web/dist/wgllm-core.js $(WEB_JS:web/src/%=web/dist/%)

$(RELAXED_LIB): src/quant/repack_relaxed.c src/quant/repack_relaxed.h web/src/relaxed.lib.js web/relaxed.mjs
	node web/relaxed.mjs $@

$(WASM_OUT)/%.o: %.c
	@mkdir -p $(dir $@)
	$(EMCC_ENV) $(EMCC) $(WASM_CFLAGS) -c $< -o $@

web/dist/wgllm-core.js: $(WASM_OBJ) $(WASM_JSLIB)
	@mkdir -p web/dist
	$(EMCC_ENV) $(EMCC) $(WASM_LDFLAGS) -o $@ $(WASM_OBJ) -lm

web/dist/%: web/src/%
	@mkdir -p web/dist
	cp $< $@

# The single-threaded core (web/dist/wgllm-core-st.js): the same sources
# without -pthread, for pages that are not cross-origin isolated (no
# SharedArrayBuffer). core.js picks it when crossOriginIsolated is false; the
# engine has no thread there: JS drives it with wgllm_web_step. CPU only: the
# GPU HAL is hal_none.c whatever WASM_HAL says (the browser HAL's waits need a
# pthread to block, or Asyncify to unwind: that is the next core's job, kept
# out of this one so that its CPU path carries no Asyncify instrumentation).
WASM_ST_OUT := build/wasm-st
WASM_ST_SRC := $(filter-out web/src/hal_browser.c web/src/hal_none.c,$(WASM_SRC)) web/src/hal_none.c
WASM_ST_OBJ := $(WASM_ST_SRC:%.c=$(WASM_ST_OUT)/%.o)
WASM_ST_CFLAGS := $(filter-out -pthread,$(WASM_CFLAGS))
WASM_ST_LDFLAGS := $(filter-out -pthread -sPTHREAD_POOL_SIZE=8 -Wno-pthreads-mem-growth -sEXPORTED_FUNCTIONS=% \
  --js-library %.lib.js,$(WASM_LDFLAGS)) $(addprefix --js-library ,$(filter-out %hal_webgpu.lib.js,$(WASM_JSLIB))) \
  -sEXPORTED_FUNCTIONS=$(WASM_EXPORTS),_wgllm_web_step
wasm: web/dist/wgllm-core-st.js

$(WASM_ST_OUT)/%.o: %.c
	@mkdir -p $(dir $@)
	$(EMCC_ENV) $(EMCC) $(WASM_ST_CFLAGS) -c $< -o $@

web/dist/wgllm-core-st.js: $(WASM_ST_OBJ) $(filter-out %hal_webgpu.lib.js,$(WASM_JSLIB))
	@mkdir -p web/dist
	$(EMCC_ENV) $(EMCC) $(WASM_ST_LDFLAGS) -o $@ $(WASM_ST_OBJ) -lm

# The single-threaded WebGPU core (web/dist/wgllm-core-st-gpu.js): the
# single-threaded objects again (Asyncify is a link-time pass: no source is
# compiled a third time) with the browser GPU HAL (hal_browser.c compiled
# without -pthread) and -sASYNCIFY. Its only blocking call is the async import
# wgllm_web_js_wait (wgllm_web.lib.js): the wasm stack unwinds to JS while a
# GPU promise or a read is pending, so the page's event loop never blocks.
# core.js picks it on pages without cross-origin isolation when WebGPU is
# asked for (or `auto` finds a hardware adapter); the CPU-only core above
# stays free of Asyncify's instrumentation (its decode speed and size).
WASM_STG_OBJ := $(filter-out %/hal_none.o,$(WASM_ST_OBJ)) $(WASM_ST_OUT)/web/src/hal_browser.o
WASM_STG_LDFLAGS := $(filter-out -sEXPORTED_RUNTIME_METHODS=%,$(WASM_ST_LDFLAGS)) --js-library web/src/hal_webgpu.lib.js \
  -sEXPORTED_RUNTIME_METHODS=FS,UTF8ToString,stringToUTF8,lengthBytesUTF8,ccall \
  -sASYNCIFY=1 -sASYNCIFY_IMPORTS=wgllm_web_js_wait -sASYNCIFY_STACK_SIZE=65536
wasm: web/dist/wgllm-core-st-gpu.js

web/dist/wgllm-core-st-gpu.js: $(WASM_STG_OBJ) $(WASM_JSLIB) web/src/hal_webgpu.lib.js
	@mkdir -p web/dist
	$(EMCC_ENV) $(EMCC) $(WASM_STG_LDFLAGS) -o $@ $(WASM_STG_OBJ) -lm

# `make wasm-test`: tests/test_quant.c and tests/wasm/*.c built with emcc
# against the single-threaded objects and run under node: the SIMD128
# kernels against the scalar reference; and tests/test_hostile_gguf.c, the
# hostile model files on a target whose size_t is 32 bits.
WASM_TEST_SRC := tests/test_quant.c tests/test_hostile_gguf.c $(wildcard tests/wasm/test_*.c)
WASM_TEST_JS := $(patsubst %.c,$(WASM_ST_OUT)/%.js,$(WASM_TEST_SRC))
WASM_LIB_ST_OBJ := $(filter-out $(WASM_ST_OUT)/web/%,$(WASM_ST_OBJ)) $(WASM_ST_OUT)/web/src/hal_none.o
.PHONY: wasm-test
wasm-test: $(WASM_TEST_JS)
	@for t in $(WASM_TEST_JS); do echo "node $$t"; node $$t || exit 1; done
	@# node 20 has relaxed SIMD behind a flag: the same kernels again, now through the relaxed module
	node --experimental-wasm-relaxed-simd $(WASM_ST_OUT)/tests/wasm/test_repack_wasm.js --relaxed

$(WASM_ST_OUT)/tests/%.js: $(WASM_ST_OUT)/tests/%.o $(WASM_ST_OUT)/tests/test.o $(WASM_LIB_ST_OBJ) tests/wasm/env.js $(RELAXED_LIB)
	$(EMCC_ENV) $(EMCC) -O2 -msimd128 -sENVIRONMENT=node -sALLOW_MEMORY_GROWTH=1 -sEXIT_RUNTIME=1 -sSINGLE_FILE=1 --pre-js tests/wasm/env.js --js-library $(RELAXED_LIB) -o $@ $(filter %.o,$^) -lm

// relaxed.lib.js - the core's door to the relaxed-SIMD kernel module
// (src/quant/repack_relaxed.c): a template that web/relaxed.mjs fills with
// the module's bytes (one importing a shared memory for the threaded core,
// one a plain memory for the single-threaded ones). Each JS context (the
// core's, and each pthread's worker) instantiates its own copy over the
// core's memory on its first call; nothing crosses threads but the memory.
// Where the browser lacks relaxed SIMD the module does not validate and
// wgllm_relaxed_available() says so: the core keeps its SIMD128 kernel.
mergeInto(LibraryManager.library, {
  $wgllmRelaxed: { module: null, exports: null, valid: -1 },
  $wgllmRelaxedBytes: function() {
#if USE_PTHREADS
    var b64 = '@RELAXED_SHARED_BASE64@';
#else
    var b64 = '@RELAXED_PLAIN_BASE64@';
#endif
    var s = atob(b64), bytes = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
    return bytes;
  },
  wgllm_relaxed_available__deps: ['$wgllmRelaxed', '$wgllmRelaxedBytes'],
  wgllm_relaxed_available: function() {
    if (wgllmRelaxed.valid < 0) {
      var bytes = wgllmRelaxedBytes();
      wgllmRelaxed.valid = typeof WebAssembly.validate === 'function' && WebAssembly.validate(bytes) ? 1 : 0;
      if (wgllmRelaxed.valid) wgllmRelaxed.module = new WebAssembly.Module(bytes);
    }
    return wgllmRelaxed.valid;
  },
  $wgllmRelaxedExports__deps: ['$wgllmRelaxed', 'wgllm_relaxed_available'],
  $wgllmRelaxedExports: function() {
    if (!wgllmRelaxed.exports) {
      if (!_wgllm_relaxed_available()) throw new Error('wgllm: relaxed-SIMD kernel called where it does not validate');
      wgllmRelaxed.exports = new WebAssembly.Instance(wgllmRelaxed.module, { env: { memory: wasmMemory } }).exports;
    }
    return wgllmRelaxed.exports;
  },
  wgllm_relaxed_q4_0__deps: ['$wgllmRelaxedExports'],
  wgllm_relaxed_q4_0: function(args) { wgllmRelaxedExports().wgllm_relaxed_q4_0(args); },
  wgllm_relaxed_q4_K__deps: ['$wgllmRelaxedExports'],
  wgllm_relaxed_q4_K: function(args) { wgllmRelaxedExports().wgllm_relaxed_q4_K(args); },
});

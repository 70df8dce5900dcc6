// wgllm_web.lib.js - JS library functions of web/src/wgllm_web.c (linked with
// --js-library). The model may load on a pthread; its progress goes to the
// host's Module.onLoadProgress on the main thread, asynchronously, so the
// loading thread never waits for the page.
mergeInto(LibraryManager.library, {
  // Sleepers of the single-threaded WebGPU core, by the address of the int32
  // they wait on: whoever completes such a wait (a read below, WGHAL.done)
  // calls wake(address) after storing its state.
  $WGWAIT: {
    pending: {},
    wake: function(p) {
      var f = WGWAIT.pending[p >>> 0];
      if (f) f();
    },
  },

  // wgllm_web_js_wait(flag, ms): the single-threaded core's only blocking
  // call, an async import (-sASYNCIFY_IMPORTS, wgllm-core-st-gpu.js): returns
  // once the int32 at `flag` is nonzero or about `ms` passed (0 done, 1 timed
  // out). Asyncify unwinds the wasm stack meanwhile, so the event loop runs
  // the promise that completes the flag; nothing spins. Without Asyncify (the
  // CPU-only single-threaded core) it cannot sleep: -1, and the caller fails
  // cleanly (core.js never asks that core for WebGPU or streamed weights).
  wgllm_web_js_wait__deps: ['$WGWAIT'],
  wgllm_web_js_wait: function(flag, ms) {
#if ASYNCIFY
    flag >>>= 0;
    return Asyncify.handleSleep(function(wakeUp) {
      if (Atomics.load(HEAP32, flag >>> 2) !== 0) return wakeUp(0);
      var timer = setTimeout(function() { finish(1); }, ms);
      var finish = function(r) {
        clearTimeout(timer);
        delete WGWAIT.pending[flag];
        wakeUp(r);
      };
      WGWAIT.pending[flag] = function() { finish(0); };
    });
#else
    return -1;
#endif
  },

  wgllm_web_js_progress__proxy: 'async',
  wgllm_web_js_progress: function(p) {
    if (Module['onLoadProgress']) Module['onLoadProgress'](p);
  },

  // One read of a streamed model (wgllm_web.c, struct web_read_wait): n bytes
  // at `off` of file `file` of Module.wgllmSources[src] (each {name, size}
  // and blob, bytes, or url and reader: a server answering range requests) into the
  // heap at dst. Runs on the main thread (proxied) and returns at once; the
  // read's promise completes `w`.
  // State 0 -> 2 (writing) -> 1 (done); if the C side gave up first (3),
  // nothing is written. Module.onStreamRead(n) counts the bytes for progress.
  wgllm_web_js_read__deps: ['$WGWAIT'],
  wgllm_web_js_read__proxy: 'sync',
  wgllm_web_js_read: function(w, src, file, off, dst, n) {
    w >>>= 0;
    dst >>>= 0;
    var complete = function(status, msg, bytes) {
      if (Atomics.compareExchange(HEAP32, w >>> 2, 0, 2) !== 0) return; // the C side stopped waiting
      if (bytes) HEAPU8.set(bytes, dst);
      if (msg) stringToUTF8(String(msg), w + 8, 512);
      HEAP32[(w + 4) >>> 2] = status;
      Atomics.store(HEAP32, w >>> 2, 1);
      Atomics.notify(HEAP32, w >>> 2);
      WGWAIT.wake(w);
      if (!status && Module['onStreamRead']) Module['onStreamRead'](n);
    };
    var files = Module['wgllmSources'] && Module['wgllmSources'][src];
    var f = files && files[file];
    if (!f) return complete(1, 'no file ' + file + ' in the streamed source ' + src);
    var where = f.name + ' [' + off + ', +' + n + ')';
    if (f.bytes) {
      if (off + n > f.bytes.length) return complete(1, 'reading ' + where + ': past the end (' + f.bytes.length + ' bytes)');
      return complete(0, '', f.bytes.subarray(off, off + n));
    }
    // a URL: its reader (store.js RangeReader: range requests, read ahead in a window)
    var part = f.reader ? f.reader.read(off, n) :
      f.url ?
      fetch(f.url, { headers: { Range: 'bytes=' + off + '-' + (off + n - 1) } }).then(function(res) {
        if (res.status !== 206) throw new Error('HTTP ' + res.status + ' to a range request');
        return res.arrayBuffer();
      }) :
      f.blob.slice(off, off + n).arrayBuffer();
    part.then(function(ab) {
      if (ab.byteLength !== n)
        complete(1, 'reading ' + where + ' gave ' + ab.byteLength + ' bytes: the file changed or is unreadable');
      else complete(0, '', ab instanceof Uint8Array ? ab : new Uint8Array(ab));
    }, function(e) {
      complete(1, 'reading ' + where + ' failed: ' + (e && e.message ? e.message : String(e)));
    });
  },
});

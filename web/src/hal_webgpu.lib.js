// hal_webgpu.lib.js - the JavaScript half of the browser GPU HAL
// (web/src/hal_browser.c implements src/backend/webgpu/hal.h with it):
// an emscripten JS library (linked with --js-library) over navigator.gpu.
//
// Threading: every GPU object lives on the module's main runtime thread
// (the page for createEngine, the Worker for createWorkerEngine) in the
// table WGHAL.objs; C holds integer ids. A device is an entry of the table
// too ({adapter, device, queue, error}), passed first to the calls that need
// it; every object remembers its device, so closing one device frees its
// objects and no other's. Each function below is marked
// __proxy: 'sync', so when the engine's pthread calls it, emscripten runs it
// on the main thread while the pthread blocks (a pthread may block). The
// functions themselves never block and never spin: the asynchronous WebGPU
// calls (requestAdapter/requestDevice, mapAsync, popErrorScope) return at
// once after starting the promise, and the promise's handler later fills a
// `struct hal_wait` in the shared heap and wakes the waiting pthread with
// Atomics.notify (C waits with emscripten_futex_wait). So the main thread
// only ever runs short synchronous calls and awaits promises.
// In the single-threaded WebGPU core (no pthreads; __proxy is ignored) C
// calls these directly and sleeps with the async import wgllm_web_js_wait
// (wgllm_web.lib.js, Asyncify): WGHAL.done also wakes that sleep
// (WGWAIT.wake), so the same promise handlers serve both cores.
//
// struct hal_wait (hal_browser.c): int32 state (0 pending, 1 done), int32
// status (0 ok), char msg[HAL_MSG] at +8.
//
// Pointers arrive as signed 32-bit numbers (negative above 2 GiB, and the
// heap may grow to 4 GiB): each function makes them unsigned (p >>>= 0)
// before any arithmetic on them.

var LibraryWgllmHal = {
  $WGHAL__deps: ['$WGWAIT'],
  $WGHAL: {
    objs: [null],
    owner: [0], // the device id of each object
    free: [],
    add: function(o, dev) {
      var id = WGHAL.free.length ? WGHAL.free.pop() : WGHAL.objs.length;
      WGHAL.objs[id] = o;
      WGHAL.owner[id] = dev;
      return id;
    },
    del: function(id) {
      if (id > 0 && WGHAL.objs[id]) {
        var o = WGHAL.objs[id];
        if (o instanceof GPUBuffer) o.destroy();
        WGHAL.objs[id] = null;
        WGHAL.owner[id] = 0;
        WGHAL.free.push(id);
      }
    },
    // records the first uncaptured error of a device (later ones are usually its consequences)
    fault: function(d, msg) {
      if (!d.error) d.error = msg;
    },
    // completes a struct hal_wait and wakes the pthread waiting on it
    done: function(w, status, msg) {
      w >>>= 0;
      if (msg) stringToUTF8(String(msg), w + 8, 1024);
      HEAP32[(w + 4) >>> 2] = status;
      Atomics.store(HEAP32, w >>> 2, 1);
      Atomics.notify(HEAP32, w >>> 2);
      WGWAIT.wake(w);
    },
    msgOf: function(e) {
      return e && e.message ? e.message : String(e);
    },
    // a view of the shared heap; writeBuffer takes AllowSharedBufferSource,
    // but a browser that refuses shared views gets a bounded non-shared copy
    write: function(q, buf, off, ptr, size) {
      ptr >>>= 0;
      try {
        q.writeBuffer(buf, off, HEAPU8, ptr, size);
      } catch (e) {
        if (!(e instanceof TypeError)) throw e;
        var step = 4 << 20;
        var tmp = new Uint8Array(Math.min(step, size));
        for (var o = 0; o < size; o += step) {
          var n = Math.min(step, size - o);
          tmp.set(HEAPU8.subarray(ptr + o, ptr + o + n));
          q.writeBuffer(buf, off + o, tmp, 0, n);
        }
      }
    },
  },

  // Starts adapter + device creation; completes `w` when done. nums: 16
  // doubles out (limits and features, see hal_browser.c; the new device's id
  // at nums[15]); strs: name[256], vendor[128], architecture[128],
  // description[256] one after the other.
  wgllm_hal_js_open__deps: ['$WGHAL'],
  wgllm_hal_js_open__proxy: 'sync',
  wgllm_hal_js_open: function(w, nums, strs) {
    w >>>= 0; nums >>>= 0; strs >>>= 0;
    var gpu = typeof navigator !== 'undefined' ? navigator.gpu : undefined;
    if (!gpu) {
      WGHAL.done(w, 1, 'this browser has no WebGPU (navigator.gpu is missing' +
                 (typeof isSecureContext !== 'undefined' && !isSecureContext ? '; the page is not a secure context' : '') +
                 ')');
      return 0;
    }
    (async function() {
      var adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
      if (!adapter) throw new Error('no WebGPU adapter (navigator.gpu.requestAdapter() returned null)');
      var info = adapter.info || (adapter.requestAdapterInfo ? await adapter.requestAdapterInfo() : {});
      var text = [info.vendor, info.architecture, info.device, info.description].join(' ');
      var isCpu = !!(info.isFallbackAdapter || adapter.isFallbackAdapter ||
                     /swiftshader|llvmpipe|lavapipe|softpipe|warp|basic render|software/i.test(text));
      var L = adapter.limits;
      var req = {};
      // everything the adapter offers (e.g. 1 GiB bindings on SwiftShader, not the 128 MiB default)
      ['maxStorageBufferBindingSize', 'maxBufferSize', 'maxComputeWorkgroupStorageSize',
       'maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX', 'maxComputeWorkgroupSizeY',
       'maxComputeWorkgroupSizeZ', 'maxComputeWorkgroupsPerDimension', 'maxStorageBuffersPerShaderStage',
       'maxUniformBufferBindingSize', 'maxBindingsPerBindGroup'].forEach(function(k) { if (L[k] !== undefined) req[k] = L[k]; });
      var feats = [];
      if (adapter.features.has('shader-f16')) feats.push('shader-f16');
      if (adapter.features.has('subgroups')) feats.push('subgroups');
      var device = await adapter.requestDevice({ label: 'wgllm', requiredFeatures: feats, requiredLimits: req });
      var d = { adapter: adapter, device: device, queue: device.queue, error: null, lost: false };
      var dev = WGHAL.add(d, 0);
      device.onuncapturederror = function(ev) { WGHAL.fault(d, 'WebGPU error: ' + WGHAL.msgOf(ev.error)); };
      device.lost.then(function(li) {
        if (li.reason === 'destroyed') return;
        d.lost = true;
        WGHAL.fault(d, 'WebGPU device lost: ' + (li.message || li.reason));
      });
      var D = device.limits;
      var v = [D.maxStorageBufferBindingSize, D.maxBufferSize, D.maxComputeWorkgroupStorageSize,
               D.maxComputeInvocationsPerWorkgroup, D.maxComputeWorkgroupSizeX, D.maxComputeWorkgroupsPerDimension,
               D.minStorageBufferOffsetAlignment, D.minUniformBufferOffsetAlignment, D.maxStorageBuffersPerShaderStage,
               info.subgroupMinSize || 0, info.subgroupMaxSize || 0,
               device.features.has('shader-f16') ? 1 : 0, device.features.has('subgroups') ? 1 : 0, isCpu ? 1 : 0,
               0, dev];
      for (var i = 0; i < v.length; i++) HEAPF64[(nums >>> 3) + i] = v[i] || 0;
      var name = info.device || info.description || [info.vendor, info.architecture].filter(Boolean).join(' ') || 'WebGPU adapter';
      stringToUTF8(name, strs, 256);
      stringToUTF8(info.vendor || '', strs + 256, 128);
      stringToUTF8(info.architecture || '', strs + 384, 128);
      stringToUTF8(info.description || '', strs + 512, 256);
      WGHAL.done(w, 0, '');
    })().catch(function(e) { WGHAL.done(w, 1, WGHAL.msgOf(e)); });
    return 0;
  },

  wgllm_hal_js_close__deps: ['$WGHAL'],
  wgllm_hal_js_close__proxy: 'sync',
  wgllm_hal_js_close: function(dev) {
    for (var i = 1; i < WGHAL.objs.length; i++) if (WGHAL.owner[i] === dev) WGHAL.del(i);
    var d = WGHAL.objs[dev];
    WGHAL.del(dev);
    if (d) d.device.destroy();
  },

  // usage: 1 storage, 2 uniform, 4 readback (enum wgllm_gpu_usage). Returns an id, 0 on failure.
  wgllm_hal_js_buffer_create__deps: ['$WGHAL'],
  wgllm_hal_js_buffer_create__proxy: 'sync',
  wgllm_hal_js_buffer_create: function(dev, size, usage, label) {
    var d = WGHAL.objs[dev];
    var U = GPUBufferUsage, u = 0;
    if (usage & 1) u |= U.STORAGE | U.COPY_SRC | U.COPY_DST;
    if (usage & 2) u |= U.UNIFORM | U.COPY_DST;
    if (usage & 4) u |= U.MAP_READ | U.COPY_DST;
    try {
      return WGHAL.add(d.device.createBuffer({ label: label ? UTF8ToString(label) : undefined, size: size, usage: u }), dev);
    } catch (e) {
      WGHAL.fault(d, 'createBuffer: ' + WGHAL.msgOf(e));
      return 0;
    }
  },

  wgllm_hal_js_release__deps: ['$WGHAL'],
  wgllm_hal_js_release__proxy: 'sync',
  wgllm_hal_js_release: function(id) {
    WGHAL.del(id);
  },

  // Runs the deferred writes and the recorded commands of one batch: `n`
  // records of 7 doubles at `rec` (op, a, b, c, d, e, f):
  //   1 dispatch pipeline a, bind group b, workgroups c x d x e
  //   2 copy buffer a + b -> buffer c + d, f bytes
  //   3 write buffer a + b <- heap (data + c), d bytes
  // Writes go straight to the queue (ordered before the submit); dispatches
  // and copies go into one command encoder and one submit (submit = 1).
  wgllm_hal_js_run__deps: ['$WGHAL'],
  wgllm_hal_js_run__proxy: 'sync',
  wgllm_hal_js_run: function(dev, rec, n, data, submit) {
    rec >>>= 0; data >>>= 0;
    var O = WGHAL.objs, d = O[dev], enc = null, pass = null;
    try {
      if (submit) enc = d.device.createCommandEncoder();
      for (var i = 0; i < n; i++) {
        var r = (rec >>> 3) + 7 * i;
        var op = HEAPF64[r];
        if (op === 1) {
          if (!pass) pass = enc.beginComputePass();
          pass.setPipeline(O[HEAPF64[r + 1]].pipe);
          pass.setBindGroup(0, O[HEAPF64[r + 2]]);
          pass.dispatchWorkgroups(HEAPF64[r + 3], HEAPF64[r + 4], HEAPF64[r + 5]);
        } else if (op === 2) {
          if (pass) { pass.end(); pass = null; }
          enc.copyBufferToBuffer(O[HEAPF64[r + 1]], HEAPF64[r + 2], O[HEAPF64[r + 3]], HEAPF64[r + 4], HEAPF64[r + 6]);
        } else if (op === 3) {
          WGHAL.write(d.queue, O[HEAPF64[r + 1]], HEAPF64[r + 2], data + HEAPF64[r + 3], HEAPF64[r + 4]);
        }
      }
      if (pass) pass.end();
      if (enc) d.queue.submit([enc.finish()]);
    } catch (e) {
      WGHAL.fault(d, 'GPU batch: ' + WGHAL.msgOf(e));
      return 1;
    }
    return 0;
  },

  // A direct queue write (large uploads; the C side bounds the size).
  wgllm_hal_js_write__deps: ['$WGHAL'],
  wgllm_hal_js_write__proxy: 'sync',
  wgllm_hal_js_write: function(dev, id, off, ptr, size) {
    var d = WGHAL.objs[dev];
    try {
      WGHAL.write(d.queue, WGHAL.objs[id], off, ptr, size);
    } catch (e) {
      WGHAL.fault(d, 'writeBuffer: ' + WGHAL.msgOf(e));
    }
  },

  // Starts mapAsync of a readback buffer; on completion copies the range to
  // `dst` in the heap, unmaps, and completes `w`.
  wgllm_hal_js_readback__deps: ['$WGHAL'],
  wgllm_hal_js_readback__proxy: 'sync',
  wgllm_hal_js_readback: function(w, dev, id, off, msize, dst, size) {
    w >>>= 0; dst >>>= 0;
    var b = WGHAL.objs[id], d = WGHAL.objs[dev];
    b.mapAsync(GPUMapMode.READ, off, msize).then(function() {
      HEAPU8.set(new Uint8Array(b.getMappedRange(off, msize), 0, size), dst);
      b.unmap();
      WGHAL.done(w, 0, '');
    }, function(e) {
      WGHAL.done(w, 1, 'mapping a GPU buffer for readback failed: ' + WGHAL.msgOf(e) +
                 (d.error ? ' (' + d.error + ')' : ''));
    });
  },

  // Compiles WGSL (entry point "main") into a compute pipeline inside a
  // validation error scope. Returns the pipeline's id at once; `w` completes
  // when the scope pops, with the compiler's messages on failure (the C side
  // then releases the id).
  wgllm_hal_js_pipeline__deps: ['$WGHAL'],
  wgllm_hal_js_pipeline__proxy: 'sync',
  wgllm_hal_js_pipeline: function(w, devId, src, label) {
    w >>>= 0;
    var dev = WGHAL.objs[devId].device;
    var lab = label ? UTF8ToString(label) : undefined;
    dev.pushErrorScope('validation');
    var mod = dev.createShaderModule({ label: lab, code: UTF8ToString(src) });
    var pipe = dev.createComputePipeline({ label: lab, layout: 'auto', compute: { module: mod, entryPoint: 'main' } });
    var id = WGHAL.add({ pipe: pipe, layout: pipe.getBindGroupLayout(0) }, devId);
    dev.popErrorScope().then(async function(err) {
      if (!err) { WGHAL.done(w, 0, ''); return; }
      var msg = WGHAL.msgOf(err);
      try {
        var ci = await mod.getCompilationInfo();
        var lines = ci.messages.filter(function(m) { return m.type === 'error'; })
          .map(function(m) { return 'line ' + m.lineNum + ':' + m.linePos + ': ' + m.message; });
        if (lines.length) msg = lines.join('; ') + ' (' + msg + ')';
      } catch (e) { /* keep the scope's message */ }
      WGHAL.done(w, 1, msg);
    }, function(e) { WGHAL.done(w, 1, WGHAL.msgOf(e)); });
    return id;
  },

  // Bind group 0 of pipeline `pid` from `n` entries of 3 doubles at `ent`
  // (buffer id, offset, size). Returns the id at once; `w` completes when the
  // validation scope pops.
  wgllm_hal_js_bindgroup__deps: ['$WGHAL'],
  wgllm_hal_js_bindgroup__proxy: 'sync',
  wgllm_hal_js_bindgroup: function(w, devId, pid, n, ent) {
    w >>>= 0; ent >>>= 0;
    var dev = WGHAL.objs[devId].device, entries = [];
    for (var i = 0; i < n; i++) {
      var e = (ent >>> 3) + 3 * i;
      entries.push({ binding: i, resource: { buffer: WGHAL.objs[HEAPF64[e]], offset: HEAPF64[e + 1], size: HEAPF64[e + 2] } });
    }
    dev.pushErrorScope('validation');
    var id = 0;
    try {
      id = WGHAL.add(dev.createBindGroup({ layout: WGHAL.objs[pid].layout, entries: entries }), devId);
    } catch (e) {
      dev.popErrorScope();
      WGHAL.done(w, 1, WGHAL.msgOf(e));
      return 0;
    }
    dev.popErrorScope().then(function(err) { WGHAL.done(w, err ? 1 : 0, err ? WGHAL.msgOf(err) : ''); },
                             function(e) { WGHAL.done(w, 1, WGHAL.msgOf(e)); });
    return id;
  },

  // Whether the device is lost (not merely an uncaptured error): the only
  // reason a wait for GPU work gives up (hal_browser.c wait_gpu).
  wgllm_hal_js_lost__deps: ['$WGHAL'],
  wgllm_hal_js_lost__proxy: 'sync',
  wgllm_hal_js_lost: function(dev) {
    var d = WGHAL.objs[dev];
    return !d || d.lost ? 1 : 0;
  },

  // The first device error since the last call, copied to msg (cap bytes);
  // returns 1 when there was one.

  wgllm_hal_js_take_error__deps: ['$WGHAL'],
  wgllm_hal_js_take_error__proxy: 'sync',
  wgllm_hal_js_take_error: function(dev, msg, cap) {
    var d = WGHAL.objs[dev];
    if (!d || !d.error) return 0;
    stringToUTF8(d.error, msg, cap);
    d.error = null;
    return 1;
  },
};

mergeInto(LibraryManager.library, LibraryWgllmHal);

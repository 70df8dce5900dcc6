// wgllm_web.lib.js - JS library functions of web/src/wgllm_web.c (linked with
// --js-library). The model may load on a pthread; its progress goes to the
// host's Module.onLoadProgress on the main thread, asynchronously, so the
// loading thread never waits for the page.
mergeInto(LibraryManager.library, {
  wgllm_web_js_progress__proxy: 'async',
  wgllm_web_js_progress: function(p) {
    if (Module['onLoadProgress']) Module['onLoadProgress'](p);
  },
});

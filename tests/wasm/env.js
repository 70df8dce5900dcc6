// env.js - --pre-js of the wasm tests (web/wasm.mk, `make wasm-test`): gives
// the C code node's environment (getenv), e.g. WGLLM_BENCH=1.
Module['preRun'] = (Module['preRun'] || []).concat(function () { Object.assign(ENV, process.env); });

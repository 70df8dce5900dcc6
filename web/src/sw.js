// sw.js - the service worker that createServiceWorkerEngine (wgllm.js)
// registers by default (as a module worker): the shared engine host of
// sw-host.js and nothing else. It intercepts no fetches, so it can be
// registered at any scope without changing how the app's pages load; an app
// that has a service worker of its own imports sw-host.js there instead.

import { hostEngine } from './sw-host.js';

hostEngine(self);
// a new version takes over at once: the engine is not tied to pages it controls
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (ev) => ev.waitUntil(self.clients.claim()));

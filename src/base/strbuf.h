/*
 * strbuf.h - the one growable string builder, read-a-whole-file helper and
 * array grower. They are declared in include/wgllm_tools.h (section
 * "Utilities") because the project's programs (server, CLI, browser glue)
 * use them too and may include only the public headers; the library's
 * modules include this file.
 */
#ifndef WGLLM_STRBUF_H
#define WGLLM_STRBUF_H

#include "base/base.h"
#include "wgllm_tools.h"

#endif

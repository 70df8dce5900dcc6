# wgllm build. `make` builds build/release/{libwgllm.a,wgllm} and the tests;
# `make asan` the same under AddressSanitizer+UBSan in build/asan (MODE=tsan:
# ThreadSanitizer in build/tsan, for the threaded tests); `make test`
# runs everything (see tests/run.sh).
#
# Sources are found by wildcard, one folder per module, so adding a file needs
# no edit here. Files named *_avx2.c / *_avx512.c / *_amx.c hold x86-64 SIMD kernels and
# get their instruction-set flags here; the rest of the code is portable and
# picks those kernels at run time (quant/quant.c), so one binary runs on any
# x86-64 CPU. Cross builds: `make CC=aarch64-linux-gnu-gcc OUT=build/arm64`
# (the target architecture comes from the compiler).

CC      ?= cc
ARCH    := $(shell $(CC) -dumpmachine | cut -d- -f1)
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wstrict-prototypes
CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -Iinclude -Isrc $(WARN) -pthread -g -MMD -MP
LDLIBS  := -lm -pthread -ldl

MODE ?= release
ifeq ($(MODE),release)
  OPT := -O2
endif
ifeq ($(MODE),asan)
  OPT := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  LDFLAGS_MODE := -fsanitize=address,undefined
endif
ifeq ($(MODE),tsan)
  OPT := -O1 -fsanitize=thread -fno-omit-frame-pointer
  LDFLAGS_MODE := -fsanitize=thread
endif
OUT ?= build/$(MODE)

ifeq ($(ARCH),x86_64)
  FLAGS_avx2   := -mavx2 -mfma -mf16c
  FLAGS_avx512 := -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16
  FLAGS_amx    := $(FLAGS_avx512) -mamx-tile -mamx-int8
endif

LIB_SRC  := $(sort $(wildcard src/*/*.c src/backend/*/*.c))
LIB_SRC  := $(filter-out src/cli/% src/server/% src/client/%,$(LIB_SRC))
# the command adds the native-only HTTP server (libmicrohttpd, cJSON) and the
# endpoint client (libcurl, cJSON)
CLIENT_SRC := $(sort $(wildcard src/client/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c src/server/*.c)) $(CLIENT_SRC)
CLI_LIBS := -lmicrohttpd -lcurl -lcjson
TEST_SRC := $(sort $(wildcard tests/test_*.c))
# tests/test_client*.c also link the client and its libraries (rule below)
CLIENT_TEST_SRC := $(filter tests/test_client%,$(TEST_SRC))
TEST_COMMON := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(OUT)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(OUT)/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(OUT)/tests/%)
TEST_COMMON_OBJ := $(TEST_COMMON:%.c=$(OUT)/%.o)
CLIENT_OBJ := $(CLIENT_SRC:%.c=$(OUT)/%.o)
CLIENT_TEST_BIN := $(CLIENT_TEST_SRC:tests/%.c=$(OUT)/tests/%)

.PHONY: all asan test clean bench
all: $(OUT)/libwgllm.a $(OUT)/wgllm $(TEST_BIN)

asan:
	$(MAKE) MODE=asan all

$(OUT)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(OPT) $(FLAGS_$(lastword $(subst _, ,$(basename $(notdir $<))))) $(CFLAGS) -c $< -o $@

$(OUT)/libwgllm.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(OUT)/wgllm: $(CLI_OBJ) $(OUT)/libwgllm.a
	$(CC) $(LDFLAGS_MODE) $(LDFLAGS) -o $@ $(CLI_OBJ) $(OUT)/libwgllm.a $(CLI_LIBS) $(LDLIBS)

$(OUT)/tests/%: $(OUT)/tests/%.o $(TEST_COMMON_OBJ) $(OUT)/libwgllm.a
	$(CC) $(LDFLAGS_MODE) $(LDFLAGS) -o $@ $< $(TEST_COMMON_OBJ) $(OUT)/libwgllm.a $(LDLIBS)

$(CLIENT_TEST_BIN): $(OUT)/tests/%: $(OUT)/tests/%.o $(TEST_COMMON_OBJ) $(CLIENT_OBJ) $(OUT)/libwgllm.a
	$(CC) $(LDFLAGS_MODE) $(LDFLAGS) -o $@ $< $(TEST_COMMON_OBJ) $(CLIENT_OBJ) $(OUT)/libwgllm.a -lcurl -lcjson $(LDLIBS)

# tests/test_web_faults.c makes the Nth allocation fail: its binary alone
# routes the allocator through the test's counter (the web glue and the core
# under it, linked from the same objects as every other test)
FAULT_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup,--wrap=posix_memalign
$(OUT)/tests/test_web_faults: LDFLAGS += $(FAULT_WRAP)

test:
	bash tests/run.sh

bench:
	bash bench/run.sh

# `make fuzz`: libFuzzer targets (fuzz/fuzz_*.c, one per parser of outside
# input) built with clang under ASan+UBSan into build/fuzz/; each links the
# library compiled the same way. `bash fuzz/run.sh [SECONDS|-runs=N]` runs them
# (the default suite runs each briefly; see fuzz/README.md).
FUZZ_CC  ?= clang
FUZZ_OUT := build/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_SRC:fuzz/%.c=$(FUZZ_OUT)/%)
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_OUT)/%.o)
.PHONY: fuzz
fuzz: $(FUZZ_BIN)

$(FUZZ_OUT)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_COMMON) -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link $(FLAGS_$(lastword $(subst _, ,$(basename $(notdir $<))))) -c $< -o $@

$(FUZZ_OUT)/libwgllm.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_OUT)/fuzz_%: fuzz/fuzz_%.c $(FUZZ_OUT)/libwgllm.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_COMMON) -O1 $(FUZZ_SAN) -fsanitize=fuzzer $< $(FUZZ_OUT)/libwgllm.a $(LDLIBS) -o $@

# the target of the native-only HTTP code (not in libwgllm.a): fuzz_sse
# includes client.c (its stream parsers are static) and links the client's
# SSE framing (http.c) and replica table (replicas.c). (fuzz_openai needs only the library: the OpenAI
# layer is in the core.)
FUZZ_NET_LIBS := -lcurl -lcjson
$(FUZZ_OUT)/fuzz_sse: fuzz/fuzz_sse.c src/client/client.c $(FUZZ_OUT)/src/client/http.o $(FUZZ_OUT)/src/client/replicas.o $(FUZZ_OUT)/libwgllm.a
	$(FUZZ_CC) $(CFLAGS_COMMON) -O1 $(FUZZ_SAN) -fsanitize=fuzzer $< $(filter %.o %.a,$^) $(FUZZ_NET_LIBS) $(LDLIBS) -o $@

# the key file of `wgllm serve --api-key-file` (policy.c), with the /metrics
# label writer it uses (info.c, which needs the client)
$(FUZZ_OUT)/fuzz_policy: fuzz/fuzz_policy.c $(FUZZ_OUT)/src/server/policy.o $(FUZZ_OUT)/src/server/info.o $(FUZZ_OUT)/src/client/client.o $(FUZZ_OUT)/src/client/http.o $(FUZZ_OUT)/src/client/replicas.o $(FUZZ_OUT)/libwgllm.a
	$(FUZZ_CC) $(CFLAGS_COMMON) -O1 $(FUZZ_SAN) -fsanitize=fuzzer $< $(filter %.o %.a,$^) $(FUZZ_NET_LIBS) -lmicrohttpd $(LDLIBS) -o $@

# `make wasm`: the browser build (web/wasm.mk)
include web/wasm.mk

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)

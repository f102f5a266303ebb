# yolotrain build. `make` builds ./yolotrain (CUDA when nvcc is found, CPU-only otherwise),
# `make NVCC=` forces CPU-only, `make STATIC=1` links third-party libraries statically,
# `make test` builds and runs every test, `make deps` installs the build dependencies.

# Every core by default: a make without -j (or MAKEFLAGS=-jN) compiles one file at a time, minutes for the
# CUDA build. `make -j1` still builds serially.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

CC      ?= gcc
NVCC    ?= $(shell command -v nvcc 2>/dev/null)
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wshadow -I. -pthread
# CUDA_ARCH: the GPUs the CUDA build runs on. `fat` (the default): machine code for sm_80 (A100), sm_86
# (RTX 30, A10), sm_89 (L4, L40S, RTX 40) and sm_90 (H100, H200), plus compute_90 PTX that the driver
# compiles at first use on newer GPUs (Blackwell: sm_100, sm_120). `native`: only the GPU(s) of this
# machine (nvcc -arch=native; quickest to build). Or compute capabilities: CUDA_ARCH="80 90"; the PTX
# is of the last. An -arch or -gencode in NVFLAGS replaces all of this.
CUDA_ARCH ?= fat
ifeq ($(CUDA_ARCH),fat)
  ARCH_LIST := 80 86 89 90
else ifneq ($(CUDA_ARCH),native)
  ARCH_LIST := $(CUDA_ARCH)
endif
ifeq ($(CUDA_ARCH),native)
  ARCH_FLAGS := -arch=native
else
  ARCH_FLAGS := $(foreach a,$(ARCH_LIST),-gencode=arch=compute_$(a),code=sm_$(a)) \
                -gencode=arch=compute_$(lastword $(ARCH_LIST)),code=compute_$(lastword $(ARCH_LIST))
endif
ifneq ($(filter -arch% --gpu-architecture% -gencode% --generate-code%,$(NVFLAGS)),)
  ARCH_FLAGS :=
endif
NVFLAGS ?= -O2 -g
# `override`: kept when NVFLAGS is set on the command line (make NVFLAGS="-O3"), which replaces the
# line above but would otherwise also drop these, which the build needs.
override NVFLAGS += $(ARCH_FLAGS) -std=c++17 -I. -Xcompiler -Wall,-Wno-unused-parameter
ifneq ($(WERROR),)
  CFLAGS  += -Werror
  override NVFLAGS += -Werror all-warnings
endif
ifneq ($(SANITIZE),)
  CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=address,undefined
endif

THIRD   := -lpng -ljpeg -linih -lyaml -lopenblas -lz
ifneq ($(STATIC),)
  # static OpenBLAS pulls in libgfortran (LAPACK parts); link that statically too
  THIRD := -Wl,-Bstatic -lpng16 -ljpeg -linih -lyaml -lopenblas -lgfortran -lquadmath -lz -Wl,-Bdynamic
endif
# FreeType and fontconfig (optional): text in plots and pictures through a real font (io/text.c),
# detected with pkg-config (or their headers) like nvcc; without them the 5x7 bitmap font (ASCII).
# `make FREETYPE=` builds without both, `make FONTCONFIG=` without fontconfig's font lookup. Linked
# dynamically even under STATIC=1 (their static forms pull in more libraries).
FT_INC     := $(firstword $(wildcard /usr/include/freetype2/ft2build.h /usr/local/include/freetype2/ft2build.h))
FREETYPE   ?= $(or $(shell pkg-config --exists freetype2 2>/dev/null && echo pkg-config),$(FT_INC))
FONTCONFIG ?= $(or $(shell pkg-config --exists fontconfig 2>/dev/null && echo pkg-config),$(wildcard /usr/include/fontconfig/fontconfig.h))
ifneq ($(FREETYPE),)
  CFLAGS += -DUSE_FREETYPE $(or $(shell pkg-config --cflags freetype2 2>/dev/null),-I$(dir $(FT_INC)))
  FT_LIBS := $(or $(shell pkg-config --libs freetype2 2>/dev/null),-lfreetype)
  ifneq ($(FONTCONFIG),)
    CFLAGS  += -DUSE_FONTCONFIG
    FT_LIBS += $(or $(shell pkg-config --libs fontconfig 2>/dev/null),-lfontconfig)
  else
    $(info fontconfig not found or disabled: text uses DejaVu Sans from its usual path, no per-character font lookup)
  endif
else
  $(info FreeType not found or disabled: text in plots and pictures uses the 5x7 bitmap font (ASCII only))
endif
LDLIBS  += $(THIRD) $(FT_LIBS) -lpthread -lm
# MPI (optional): several processes joined by mpirun or srun (core/procs/comm.h), detected by mpicc like nvcc:
# its compile and link flags (Open MPI's --showme, MPICH's -compile_info/-link_info). Without it, or
# when a binary with it is not started by a launcher, yolotrain is one process. `make MPICC=` builds
# without MPI. Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin (make deps does).
MPICC   ?= $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
  MPI_CFLAGS := $(or $(shell $(MPICC) --showme:compile 2>/dev/null),$(patsubst %,-I%,$(filter-out -I,$(shell $(MPICC) -compile_info 2>/dev/null | tr ' ' '\n' | sed -n 's/^-I//p'))))
  MPI_LIBS   := $(or $(shell $(MPICC) --showme:link 2>/dev/null),-lmpi)
  CFLAGS += -DUSE_MPI
  LDLIBS += $(MPI_LIBS)
else
  $(info mpicc not found or disabled: yolotrain runs as one process (no mpirun/srun joining))
endif

ifeq ($(NVCC),)
  $(info nvcc not found or disabled: building CPU-only yolotrain)
  VARIANT := cpu
  GPU_SRCS :=
else
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  VARIANT := cuda
  CFLAGS  += -DUSE_CUDA -I$(CUDA_HOME)/include
  override NVFLAGS += -DUSE_CUDA
  LDLIBS  += -L$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
  GPU_SRCS := $(wildcard gpu/*.cu gpu/*.c gpu/*/*.cu gpu/*/*.c)
  # cuDNN 9 (optional): detected by its header like nvcc; the library is opened at run time
  # (gpu/cudnn_conv.c), so a binary built with it still runs, on im2col + cuBLAS, where it is absent.
  # `make CUDNN=` builds without it; CUDNN_INCLUDE names another header folder.
  CUDNN_INCLUDE ?= $(firstword $(foreach d,$(CUDA_HOME)/include /usr/include /usr/include/x86_64-linux-gnu,$(if $(wildcard $(d)/cudnn_graph.h),$(d))))
  CUDNN ?= $(CUDNN_INCLUDE)
  ifneq ($(CUDNN),)
    CFLAGS  += -DUSE_CUDNN -I$(CUDNN_INCLUDE)
    override NVFLAGS += -DUSE_CUDNN
    LDLIBS  += -ldl
  else
    $(info cuDNN headers not found: convolutions use im2col + cuBLAS only)
  endif
  # NCCL (optional): the gradient sums across processes between GPUs (gpu/comm_nccl.c), detected by its
  # header; the library (libnccl.so.2) is opened at run time like cuDNN's, so the binary runs without it
  # (the sums then go through host memory and MPI). `make NCCL=` builds without it.
  NCCL_INCLUDE ?= $(firstword $(foreach d,$(CUDA_HOME)/include /usr/include,$(if $(wildcard $(d)/nccl.h),$(d))))
  NCCL ?= $(NCCL_INCLUDE)
  ifneq ($(NCCL),)
    CFLAGS  += -DUSE_NCCL -I$(NCCL_INCLUDE)
    LDLIBS  += -ldl
  endif
endif

B        := build/$(VARIANT)$(if $(SANITIZE),-san)
LIB_SRCS := $(filter-out core/main.c,$(wildcard core/*.c core/*/*.c io/*.c io/*/*.c cfg/*.c cfg/*/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(B)/%.o) $(patsubst %.c,$(B)/%.o,$(GPU_SRCS:%.cu=$(B)/%.o))
TEST_SRCS:= $(wildcard test/test_*.c)
TESTS    := $(TEST_SRCS:test/%.c=$(B)/test/%)
BENCH_SRCS := $(wildcard bench/*.c)
BENCHES  := $(BENCH_SRCS:bench/%.c=bench/%)

.PHONY: all test deps clean benches fuzz layers install uninstall install-check FORCE
all: yolotrain

# `yolotrain --version`: the commit this binary was built from
YT_VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(B)/core/main.o: CFLAGS += -DYT_VERSION='"$(YT_VERSION)"'
# main.o is rebuilt when the version changes (a new commit), not only when core/main.c does
$(B)/core/main.o: $(B)/version
$(B)/version: FORCE
	@mkdir -p $(dir $@); echo '$(YT_VERSION)' | cmp -s - $@ || echo '$(YT_VERSION)' > $@
# core/procs/comm_mpi.o (and the NCCL file) are rebuilt when MPI or NCCL comes or goes
$(B)/core/procs/comm.o $(B)/core/procs/comm_mpi.o $(B)/gpu/comm_nccl.o: $(B)/commflags
$(B)/core/procs/comm_mpi.o: CFLAGS += $(MPI_CFLAGS)
$(B)/commflags: FORCE
	@mkdir -p $(dir $@); echo '$(MPICC) $(NCCL)' | cmp -s - $@ || echo '$(MPICC) $(NCCL)' > $@

yolotrain: $(B)/core/main.o $(B)/libyt.a FORCE
	$(CC) $(LDFLAGS) -o $@ $(B)/core/main.o $(B)/libyt.a $(LDLIBS)

$(B)/libyt.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(B)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c -o $@ $<

$(B)/test/%: test/%.c $(B)/libyt.a test/test.h test/gpu_harness.h test/trainer_host.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libyt.a $(LDLIBS)

benches: $(BENCHES)
# relinked every time: the CPU-only and the CUDA variant write the same bench/NAME
bench/%: bench/%.c $(B)/libyt.a FORCE
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libyt.a $(LDLIBS)

test: yolotrain $(TESTS)
	@bash test/install_check.sh; installed=$$?; bash test/run.sh $(B)/test && [ $$installed -eq 0 ]

# make layers: the boundary between the specification and the devices (core/README.md). core/, io/ and
# cfg/ include nothing from gpu/ and no CUDA header (a device is reached through core/spec/backend.h's table),
# and USE_CUDA appears in none of their files but core/devices/backends.c, which registers the GPU backend. And every
# kernel of gpu/ begins with pdl_entry() (test/pdl_check.sh): gpu/graph_pdl.c starts our kernels early. And
# the docs hold (test/docs_check.sh): every key of cfg/schema.c has a help line and is in cfg/README.md, and
# every repo path named in a source comment or a README exists. And every YT_ environment variable the
# source names is in core/base/switches.c's registry, each variant and test hook with a test that pins it
# (test/switch_check.sh). And the folders of core/ are layers (test/layer_check.sh): base < cfg < io <
# spec < trainer < procs < devices < train < eval < main.c, an include goes down only (the known exceptions listed
# there), and no files include each other in a loop (tsort; the known loops listed there).
LAYER_DIRS := core io cfg
layers:
	@fail=0; \
	 bad=$$(grep -rnE '#[[:space:]]*include[[:space:]]*["<](\.\./)*gpu/|#[[:space:]]*include[[:space:]]*<(cuda|cublas|cudnn)' --exclude='*.md' $(LAYER_DIRS)); \
	 if [ -n "$$bad" ]; then fail=1; echo "make layers: core/, io/ and cfg/ include nothing from gpu/ or CUDA (use core/spec/backend.h's table):"; echo "$$bad"; fi; \
	 bad=$$(grep -rn 'USE_CUDA' --exclude='*.md' $(LAYER_DIRS) | grep -v '^core/devices/backends\.c:'); \
	 if [ -n "$$bad" ]; then fail=1; echo "make layers: USE_CUDA belongs in gpu/ and core/devices/backends.c only:"; echo "$$bad"; fi; \
	 if ! bash test/layer_check.sh; then fail=1; echo "make layers: the folders of core/ include downward only, and no files include each other in a loop (test/layer_check.sh, core/README.md)"; fi; \
	 if ! bash test/pdl_check.sh; then fail=1; echo "make layers: every kernel of gpu/ begins with pdl_entry() (gpu/pdl.cuh)"; fi; \
	 if ! bash test/docs_check.sh; then fail=1; echo "make layers: every config key has help and docs, and every path the comments and READMEs name exists (test/docs_check.sh)"; fi; \
	 if ! bash test/switch_check.sh >/dev/null; then fail=1; bash test/switch_check.sh; echo "make layers: every YT_ variable is in the registry (core/base/switches.c)"; fi; \
	 if [ $$fail = 0 ]; then echo "make layers: ok (core/ io/ cfg/ reach the devices only through core/spec/backend.h; every kernel begins with pdl_entry(); every key documented, every path named exists; every YT_ variable is in core/base/switches.c; the folders of core/ include downward, with no loop)"; fi; \
	 exit $$fail

# make fuzz: the libFuzzer targets of test/fuzz/ (clang + its fuzzer runtime), FUZZ_SECONDS each
FUZZ_SECONDS ?= 60
fuzz:
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash test/fuzz/run.sh

deps:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	 if command -v apt-get >/dev/null; then \
	   $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends \
	     gcc make pkg-config libpng-dev libjpeg62-turbo-dev libinih-dev libyaml-dev libopenblas-dev zlib1g-dev gfortran \
	   || $$SUDO apt-get install -y -qq --no-install-recommends \
	     gcc make pkg-config libpng-dev libjpeg-turbo8-dev libinih-dev libyaml-dev libopenblas-dev zlib1g-dev gfortran; \
	   $$SUDO apt-get install -y -qq --no-install-recommends libfreetype-dev libfontconfig-dev fonts-dejavu-core >/dev/null 2>&1 \
	     || echo "make deps: FreeType/fontconfig/DejaVu not installed: plots and pictures use the 5x7 bitmap font"; \
	   $$SUDO apt-get install -y -qq --no-install-recommends libopenmpi-dev openmpi-bin >/dev/null 2>&1 \
	     || echo "make deps: Open MPI not installed: yolotrain runs as one process (no mpirun/srun)"; \
	   $$SUDO apt-get install -y -qq --no-install-recommends clang libclang-rt-dev >/dev/null 2>&1 \
	     || echo "make deps: clang's libFuzzer runtime not installed: make fuzz will not build"; \
	   if apt-cache policy python3-onnx 2>/dev/null | grep -q 'Candidate: [0-9]'; then \
	     $$SUDO apt-get install -y -qq --no-install-recommends python3-onnx >/dev/null 2>&1 \
	       || echo "make deps: python3-onnx did not install: test_onnx will skip"; \
	   else echo "make deps: no python3-onnx package here: test_onnx (the ONNX export check) will skip"; fi; \
	 else echo "make deps: no apt-get here; install libpng, libjpeg-turbo, inih, libyaml and OpenBLAS development packages by hand" >&2; exit 1; fi

# make install [PREFIX=/usr/local] [DESTDIR=]: the binary to PREFIX/bin, the model configs to
# PREFIX/share/yolotrain/cfg (where the binary looks for a config not in the current directory).
PREFIX ?= /usr/local
install: yolotrain
	install -d "$(DESTDIR)$(PREFIX)/bin" "$(DESTDIR)$(PREFIX)/share/yolotrain/cfg"
	install -m 755 yolotrain "$(DESTDIR)$(PREFIX)/bin/yolotrain"
	install -m 644 cfg/*.ini "$(DESTDIR)$(PREFIX)/share/yolotrain/cfg/"

uninstall:
	rm -f "$(DESTDIR)$(PREFIX)/bin/yolotrain"
	rm -rf "$(DESTDIR)$(PREFIX)/share/yolotrain"

# make install-check: install into a temporary PREFIX, run the installed binary from another folder
# with bare config names, uninstall, check that nothing is left (make test runs it).
install-check: yolotrain
	@bash test/install_check.sh

clean:
	rm -rf build yolotrain $(BENCHES)

-include $(shell find build -name '*.d' 2>/dev/null)

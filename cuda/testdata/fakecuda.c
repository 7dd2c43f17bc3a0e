/*
 * fakecuda.c: a fake CUDA driver (libcuda.so.1) for package cuda's tests.
 *
 * The tests build it with gcc into t.TempDir() and load it through the same
 * purego path as the real driver (Options.Library / GPUMEM_LIBCUDA).  It
 * implements every symbol package cuda binds, on host memory:
 *
 *   - Device pointers are real host addresses (aligned_alloc), so copies,
 *     memsets and the kernels it knows by name (see "kernels" below: the
 *     two of KernelsPTX, examples/cuda's saxpy and sum_f32, the tests'
 *     scalars) move real bytes.  Every device range
 *     a call touches must lie inside a live allocation or an accessible VMM
 *     mapping, else CUDA_ERROR_INVALID_VALUE (1); a kernel that would touch
 *     memory outside one fails with CUDA_ERROR_ILLEGAL_ADDRESS (700), which
 *     is sticky like the real thing: every later call returns 700.
 *   - Work runs at enqueue; streams and events are bookkeeping.  A capturing
 *     stream records its work as graph nodes instead (copies of the kernel
 *     parameters, as the driver makes), and cuGraphLaunch replays them.
 *   - The primary context is current per thread (cuCtxSetCurrent), and every
 *     call that needs one returns CUDA_ERROR_INVALID_CONTEXT (201) without
 *     it: that is how the tests see that the executors make it current.
 *   - Capture rules modelled on the driver's:
 *       * 900 UNSUPPORTED: sync of a capturing stream; a "potentially unsafe"
 *         call (alloc, free, ctx sync, sync memcpy) from a thread that began
 *         a THREAD_LOCAL capture, or from any thread during a GLOBAL one;
 *         pageable HtoD/DtoH copies into a capture; capture on stream 0.
 *         Each invalidates the capture concerned.
 *       * 901 INVALIDATED: any work on an invalidated capture, and its end.
 *       * 903 UNMATCHED: ending a capture the stream did not begin.
 *       * 904 UNJOINED: ending a capture whose fork was not joined back.
 *       * 905 ISOLATION: a capturing stream waiting on an event recorded
 *         outside its capture.
 *       * 907 CAPTURED_EVENT: query/sync of an event last recorded in a
 *         capture.
 *       * 908 WRONG_THREAD: ending a THREAD_LOCAL/GLOBAL capture on another
 *         thread than the one that began it (the capture stays active).
 *   - Every call is appended to a log, one line each:
 *         <name> tid=<os thread> <key>=<value>... rc=<CUresult>
 *     which the tests read back with fake_log.
 *
 * Test controls (not part of the CUDA API): fake_set_next_error,
 * fake_set_total_mem, fake_set_device_count, fake_set_attribute, fake_log,
 * fake_log_clear, fake_live, fake_mapped_bytes.
 *
 * Virtual memory: a reservation is an untouched anonymous mmap (no host
 * memory until written); each cuMemMap makes a whole range of it accessible
 * (after cuMemSetAccess), cuMemUnmap must name exactly one mapped range and
 * discards its bytes (madvise: a range mapped again reads as zero, and the
 * host memory goes back), and a physical allocation counts against the
 * device memory until it is both released and unmapped.
 *
 * Build switches: -DFAKE_NO_VMM leaves out the eight virtual-memory symbols,
 * -DFAKE_NO_MEMSET leaves out cuMemsetD8Async, -DFAKE_NO_PARAM_INFO leaves
 * out cuFuncGetParamInfo, -DFAKE_NO_LIBRARY leaves out the four library
 * API symbols (cuLibraryLoadData, cuLibraryGetKernel, cuKernelGetFunction,
 * cuLibraryUnload), -DFAKE_OMIT_GRAPH_LAUNCH leaves out the required
 * cuGraphLaunch, -DFAKE_LAZY_JIT defers cuModuleLoadDataEx's check of the
 * image to the first cuModuleGetFunction (see "modules" below).  Build with -fvisibility=hidden
 * -Wl,-Bsymbolic: several copies may be loaded RTLD_GLOBAL into one test
 * process, and each must keep to its own state.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;

enum {
	OK = 0,
	INVALID_VALUE = 1,
	OUT_OF_MEMORY = 2,
	NOT_INITIALIZED = 3,
	NO_DEVICE = 100,
	INVALID_DEVICE = 101,
	INVALID_IMAGE = 200,
	INVALID_CONTEXT = 201,
	INVALID_PTX = 218,
	INVALID_HANDLE = 400,
	ILLEGAL_STATE = 401,
	NOT_FOUND = 500,
	NOT_READY = 600,
	ILLEGAL_ADDRESS = 700,
	CAPTURE_UNSUPPORTED = 900,
	CAPTURE_INVALIDATED = 901,
	CAPTURE_UNMATCHED = 903,
	CAPTURE_UNJOINED = 904,
	CAPTURE_ISOLATION = 905,
	CAPTURED_EVENT = 907,
	CAPTURE_WRONG_THREAD = 908,
};

enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- configuration and global state (all guarded by mu) ---- */

static int initialized;
static int device_count = 1;
static unsigned long long total_mem = 1ull << 30;
static unsigned long long allocated;
static int poisoned;              /* sticky error code, 0 when healthy */
static char next_err_fn[128];     /* one-shot error cue */
static int next_err_code;
static int attributes[256];
static int attributes_set;

#define GRANULARITY (2u << 20)

struct primary {
	int refs;
} primary;

static __thread void *cur_ctx; /* the context current on this thread */

/* ---- call log ---- */

static char *log_buf;
static size_t log_len, log_cap;

static void log_append(const char *s, size_t n)
{
	if (log_len + n + 1 > log_cap) {
		size_t c = log_cap ? log_cap * 2 : 4096;
		while (c < log_len + n + 1)
			c *= 2;
		log_buf = realloc(log_buf, c);
		log_cap = c;
	}
	memcpy(log_buf + log_len, s, n);
	log_len += n;
	log_buf[log_len] = 0;
}

static long tid(void) { return (long)syscall(SYS_gettid); }

/* logcall appends "<fn> tid=<tid> <args> rc=<rc>\n". */
static CUresult logcall(const char *fn, CUresult rc, const char *fmt, ...)
{
	char line[512];
	int n = snprintf(line, sizeof line, "%s tid=%ld", fn, tid());
	if (fmt && *fmt) {
		line[n++] = ' ';
		va_list ap;
		va_start(ap, fmt);
		n += vsnprintf(line + n, sizeof line - n, fmt, ap);
		va_end(ap);
	}
	n += snprintf(line + n, sizeof line - n, " rc=%d\n", rc);
	log_append(line, (size_t)n);
	return rc;
}

/* ---- allocations ---- */

struct alloc {
	unsigned char *p;
	size_t n;
	struct alloc *next;
};
static struct alloc *allocs;
static int live_allocs;

/* ---- virtual memory ---- */

struct reservation {
	unsigned char *base;
	size_t size;
	struct reservation *next;
};
struct physical {
	size_t size;
	int released;
	int maps;
	struct physical *next;
};
struct mapping {
	unsigned char *base;
	size_t size;
	struct physical *h;
	int access;
	struct mapping *next;
};
static struct reservation *reservations;
static struct physical *physicals;
static struct mapping *mappings;

/* dev_range_ok reports whether [p, p+n) lies in one live allocation or is
 * covered by read-write mappings end to end: adjacent mappings (one physical
 * allocation per granule) form one contiguous range, as on the device. */
static int dev_range_ok(CUdeviceptr p, size_t n)
{
	unsigned char *b = (unsigned char *)(uintptr_t)p;
	if (p == 0)
		return 0;
	for (struct alloc *a = allocs; a; a = a->next)
		if (b >= a->p && n <= a->n && (size_t)(b - a->p) <= a->n - n)
			return 1;
	unsigned char *end = b + n;
	for (;;) {
		struct mapping *hit = NULL;
		for (struct mapping *m = mappings; m; m = m->next)
			if (m->access == 3 && b >= m->base && b < m->base + m->size)
				hit = m;
		if (!hit)
			return 0;
		if (end <= hit->base + hit->size)
			return 1;
		b = hit->base + hit->size;
	}
}

/* ---- streams, events, graphs ---- */

enum { NODE_COPY, NODE_SET, NODE_KERNEL };

#define MAX_PARAMS 16

struct node {
	int kind;
	CUdeviceptr dst, src;
	size_t n;
	unsigned char value;
	int kernel;
	unsigned long long threads, block;
	unsigned shared;
	int nparams;
	unsigned char params[MAX_PARAMS][8];
};

struct nodes {
	struct node *v;
	size_t len, cap;
};

static void nodes_push(struct nodes *ns, struct node n)
{
	if (ns->len == ns->cap) {
		ns->cap = ns->cap ? ns->cap * 2 : 8;
		ns->v = realloc(ns->v, ns->cap * sizeof *ns->v);
	}
	ns->v[ns->len++] = n;
}

static struct nodes nodes_copy(const struct nodes *ns)
{
	struct nodes c = {0};
	for (size_t i = 0; i < ns->len; i++)
		nodes_push(&c, ns->v[i]);
	return c;
}

struct stream {
	int capturing;
	int invalidated;
	int mode;
	long begin_tid;
	struct stream *origin; /* non-NULL: forked into origin's capture */
	int joined;
	struct nodes nodes; /* the capture's nodes (root streams only) */
	struct stream *next;
};
static struct stream *streams;
static int live_streams;

struct event {
	int captured;
	struct stream *root;     /* capture the last record belonged to */
	struct stream *recorder; /* stream that recorded it during capture */
	struct event *next;
};
static struct event *events;
static int live_events;

struct graph {
	struct nodes nodes;
	struct graph *next;
};
static struct graph *graphs, *execs;
static int live_graphs, live_execs;

struct module {
	char *image;
	int library; /* loaded by cuLibraryLoadData: a CUlibrary, not a CUmodule */
	int jitted;  /* the image was checked (at load, or at the first lookup when loaded lazily) */
	char *log;   /* a lazy load's error log buffer, as the load's options gave it (NULL: none) */
	size_t logsize;
	struct module *next;
};
/* A function is also the fake's CUkernel: cuKernelGetFunction returns the
 * kernel itself as the CUfunction of the current context. */
struct function {
	struct module *mod;
	int kernel;
	int nparams;
	size_t psize[MAX_PARAMS], poff[MAX_PARAMS];
	struct function *next;
};
static struct module *modules;
static struct function *functions;
static int live_modules;

static int find_stream(struct stream *s)
{
	if (s == NULL)
		return 1; /* the legacy default stream */
	for (struct stream *x = streams; x; x = x->next)
		if (x == s)
			return 1;
	return 0;
}

static struct stream *root_of(struct stream *s) { return s->origin ? s->origin : s; }

static void end_capture(struct stream *root)
{
	for (struct stream *x = streams; x; x = x->next)
		if (x->origin == root) {
			x->capturing = 0;
			x->origin = NULL;
			x->joined = 0;
		}
	root->capturing = 0;
	root->invalidated = 0;
	free(root->nodes.v);
	root->nodes = (struct nodes){0};
}

/* unsafe_call applies the rule for "potentially unsafe" calls: they
 * invalidate a THREAD_LOCAL capture begun by this thread and any GLOBAL
 * capture.  It returns 900 when it invalidated something. */
static CUresult unsafe_call(void)
{
	long me = tid();
	int hit = 0;
	for (struct stream *x = streams; x; x = x->next) {
		if (!x->capturing || x->origin || x->invalidated)
			continue;
		if (x->mode == MODE_GLOBAL || (x->mode == MODE_THREAD_LOCAL && x->begin_tid == me)) {
			x->invalidated = 1;
			hit = 1;
		}
	}
	return hit ? CAPTURE_UNSUPPORTED : OK;
}

static int is_sticky(int code)
{
	return code == 214 || code == 700 || code == 710 || (code >= 714 && code <= 719);
}

/* enter is the common prologue: initialisation, the one-shot error cue, the
 * sticky error, then the current context when the call needs one. */
static CUresult enter(const char *fn, int need_init, int need_ctx)
{
	if (need_init && !initialized)
		return NOT_INITIALIZED;
	if (next_err_code && strcmp(fn, next_err_fn) == 0) {
		int code = next_err_code;
		next_err_code = 0;
		next_err_fn[0] = 0;
		if (is_sticky(code))
			poisoned = code;
		return code;
	}
	if (poisoned)
		return poisoned;
	if (need_ctx && (cur_ctx != &primary || primary.refs == 0))
		return INVALID_CONTEXT;
	return OK;
}

/* ---- kernels ----
 *
 * The fake runs the kernels it knows by entry name, on host memory, with
 * the parameters the PTX declares (sizes checked at cuModuleGetFunction:
 * an entry of a known name but another signature is an unknown kernel).
 * Launching an unknown kernel fails with CUDA_ERROR_NOT_SUPPORTED (801).
 *
 *   add_one(u64 data, u64 n)            data[i] += 1, i < min(n, threads)
 *   fill_u8(u64 data, u64 n, u32 v)     data[i] = v, i < min(n, threads)
 *   saxpy(u64 n, f32 a, u64 x, u64 y)   y[i] = a*x[i] + y[i] (float), i < min(n, threads)
 *   sum_f32(u64 x, u64 out, u64 n)      *out += x[0] + ... + x[n-1] (float); a
 *                                       grid-stride loop, so any grid covers n;
 *                                       needs block*4 bytes of dynamic shared
 *                                       memory, else 700 as on the device
 *   scalars(u64 out, u8, s8, u16, s16, u32, s32, u64, s64, f32, f64)
 *                                       stores parameter k+1 in its width at
 *                                       out + 8k (80 bytes)
 */
enum { K_UNKNOWN, K_ADD_ONE, K_FILL_U8, K_SAXPY, K_SUM_F32, K_SCALARS, K_COUNT };

static const struct {
	const char *name;
	int nparams;
	size_t size[MAX_PARAMS];
} kernels[K_COUNT] = {
	[K_UNKNOWN] = {"?", 0, {0}},
	[K_ADD_ONE] = {"add_one", 2, {8, 8}},
	[K_FILL_U8] = {"fill_u8", 3, {8, 8, 4}},
	[K_SAXPY] = {"saxpy", 4, {8, 4, 8, 8}},
	[K_SUM_F32] = {"sum_f32", 3, {8, 8, 8}},
	[K_SCALARS] = {"scalars", 11, {8, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8}},
};

static unsigned long long param_u64(const struct node *n, int i)
{
	unsigned long long v;
	memcpy(&v, n->params[i], 8);
	return v;
}

static CUresult fault(void)
{
	poisoned = ILLEGAL_ADDRESS;
	return ILLEGAL_ADDRESS;
}

static CUresult run_kernel(const struct node *n)
{
	switch (n->kernel) {
	case K_ADD_ONE:
	case K_FILL_U8: {
		unsigned long long ptr = param_u64(n, 0), count = param_u64(n, 1);
		if (count > n->threads)
			count = n->threads;
		if (count == 0)
			return OK;
		if (!dev_range_ok(ptr, count))
			return fault();
		unsigned char *p = (unsigned char *)(uintptr_t)ptr;
		if (n->kernel == K_ADD_ONE) {
			for (unsigned long long i = 0; i < count; i++)
				p[i]++;
		} else {
			unsigned int v;
			memcpy(&v, n->params[2], 4);
			memset(p, (int)(v & 0xff), count);
		}
		return OK;
	}
	case K_SAXPY: {
		unsigned long long count = param_u64(n, 0);
		float a;
		memcpy(&a, n->params[1], 4);
		if (count > n->threads)
			count = n->threads;
		if (count == 0)
			return OK;
		unsigned long long xp = param_u64(n, 2), yp = param_u64(n, 3);
		if (!dev_range_ok(xp, count * 4) || !dev_range_ok(yp, count * 4))
			return fault();
		const float *x = (const float *)(uintptr_t)xp;
		float *y = (float *)(uintptr_t)yp;
		for (unsigned long long i = 0; i < count; i++)
			y[i] = a * x[i] + y[i];
		return OK;
	}
	case K_SUM_F32: {
		unsigned long long xp = param_u64(n, 0), op = param_u64(n, 1), count = param_u64(n, 2);
		if (n->shared < n->block * 4)
			return fault(); /* the block's partial sums would overrun shared memory */
		if (!dev_range_ok(op, 4) || (count && !dev_range_ok(xp, count * 4)))
			return fault();
		/* Summed in double: the device's tree of partial sums loses far
		 * less than one float running total would. */
		const float *x = (const float *)(uintptr_t)xp;
		double sum = 0;
		for (unsigned long long i = 0; i < count; i++)
			sum += x[i];
		float *out = (float *)(uintptr_t)op;
		*out = (float)((double)*out + sum);
		return OK;
	}
	case K_SCALARS: {
		unsigned long long op = param_u64(n, 0);
		if (!dev_range_ok(op, 80))
			return fault();
		unsigned char *out = (unsigned char *)(uintptr_t)op;
		for (int k = 1; k < 11; k++)
			memcpy(out + 8 * (k - 1), n->params[k], kernels[K_SCALARS].size[k]);
		return OK;
	}
	}
	return 801; /* CUDA_ERROR_NOT_SUPPORTED: the fake cannot run it */
}

static CUresult run_node(const struct node *n)
{
	switch (n->kind) {
	case NODE_COPY:
		if (!dev_range_ok(n->dst, n->n) || !dev_range_ok(n->src, n->n))
			return INVALID_VALUE;
		memmove((void *)(uintptr_t)n->dst, (void *)(uintptr_t)n->src, n->n);
		return OK;
	case NODE_SET:
		if (!dev_range_ok(n->dst, n->n))
			return INVALID_VALUE;
		memset((void *)(uintptr_t)n->dst, n->value, n->n);
		return OK;
	case NODE_KERNEL:
		return run_kernel(n);
	}
	return INVALID_VALUE;
}

/* submit runs n on s now, or records it when s captures. */
static CUresult submit(struct stream *s, struct node n)
{
	if (s && s->capturing) {
		struct stream *r = root_of(s);
		if (r->invalidated)
			return CAPTURE_INVALIDATED;
		nodes_push(&r->nodes, n);
		return OK;
	}
	return run_node(&n);
}

/* ================= test controls ================= */

EXPORT void fake_set_next_error(const char *fn, int code)
{
	pthread_mutex_lock(&mu);
	snprintf(next_err_fn, sizeof next_err_fn, "%s", fn);
	next_err_code = code;
	pthread_mutex_unlock(&mu);
}

EXPORT void fake_set_total_mem(unsigned long long n)
{
	pthread_mutex_lock(&mu);
	total_mem = n;
	pthread_mutex_unlock(&mu);
}

EXPORT void fake_set_device_count(int n)
{
	pthread_mutex_lock(&mu);
	device_count = n;
	pthread_mutex_unlock(&mu);
}

/* init_attributes fills the default attribute table once. */
static void init_attributes(void)
{
	if (attributes_set)
		return;
	attributes[16] = 132; /* multiprocessors */
	attributes[75] = 9;   /* compute capability major */
	attributes[76] = 0;   /* compute capability minor */
#ifndef FAKE_NO_VMM
	attributes[102] = 1; /* virtual memory management supported */
#endif
	attributes_set = 1;
}

EXPORT void fake_set_attribute(int attr, int value)
{
	pthread_mutex_lock(&mu);
	init_attributes();
	if (attr >= 0 && attr < 256)
		attributes[attr] = value;
	pthread_mutex_unlock(&mu);
}

/* fake_log copies the log (NUL-terminated, truncated to cap) and returns its
 * full length. */
EXPORT size_t fake_log(char *buf, size_t cap)
{
	pthread_mutex_lock(&mu);
	size_t n = log_len;
	if (cap > 0) {
		size_t c = n < cap - 1 ? n : cap - 1;
		if (c)
			memcpy(buf, log_buf, c);
		buf[c] = 0;
	}
	pthread_mutex_unlock(&mu);
	return n;
}

EXPORT void fake_log_clear(void)
{
	pthread_mutex_lock(&mu);
	log_len = 0;
	if (log_buf)
		log_buf[0] = 0;
	pthread_mutex_unlock(&mu);
}

/* fake_live counts live objects of a kind: "allocs", "streams", "events",
 * "modules", "graphs", "execs", "ctxrefs", "reservations", "physicals",
 * "mappings"; -1 for an unknown kind. */
EXPORT int fake_live(const char *kind)
{
	int n = -1;
	pthread_mutex_lock(&mu);
	if (!strcmp(kind, "allocs"))
		n = live_allocs;
	else if (!strcmp(kind, "streams"))
		n = live_streams;
	else if (!strcmp(kind, "events"))
		n = live_events;
	else if (!strcmp(kind, "modules"))
		n = live_modules;
	else if (!strcmp(kind, "graphs"))
		n = live_graphs;
	else if (!strcmp(kind, "execs"))
		n = live_execs;
	else if (!strcmp(kind, "ctxrefs"))
		n = primary.refs;
	else if (!strcmp(kind, "reservations") || !strcmp(kind, "physicals") || !strcmp(kind, "mappings")) {
		n = 0;
		if (kind[0] == 'r')
			for (struct reservation *r = reservations; r; r = r->next)
				n++;
		else if (kind[0] == 'p')
			for (struct physical *p = physicals; p; p = p->next)
				n++;
		else
			for (struct mapping *m = mappings; m; m = m->next)
				n++;
	}
	pthread_mutex_unlock(&mu);
	return n;
}

/* fake_mapped_bytes is the bytes of every live VMM mapping (cuMemMap not yet
 * undone by cuMemUnmap). */
EXPORT unsigned long long fake_mapped_bytes(void)
{
	unsigned long long n = 0;
	pthread_mutex_lock(&mu);
	for (struct mapping *m = mappings; m; m = m->next)
		n += m->size;
	pthread_mutex_unlock(&mu);
	return n;
}

/* ================= driver API ================= */

#define BEGIN(fn, init, ctx)                                                                                           \
	static const char *const FN = fn;                                                                              \
	pthread_mutex_lock(&mu);                                                                                       \
	CUresult rc = enter(FN, init, ctx)
#define END(...)                                                                                                       \
	logcall(FN, rc, __VA_ARGS__);                                                                                  \
	pthread_mutex_unlock(&mu);                                                                                     \
	return rc

EXPORT CUresult cuInit(unsigned int flags)
{
	BEGIN("cuInit", 0, 0);
	if (!rc) {
		if (flags != 0)
			rc = INVALID_VALUE;
		else if (device_count == 0)
			rc = NO_DEVICE;
		else
			initialized = 1;
	}
	END("flags=%u", flags);
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	BEGIN("cuDriverGetVersion", 0, 0);
	if (!rc) {
		if (!v)
			rc = INVALID_VALUE;
		else
			*v = 12040;
	}
	END("");
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	BEGIN("cuDeviceGetCount", 1, 0);
	if (!rc)
		*n = device_count;
	END("");
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	BEGIN("cuDeviceGet", 1, 0);
	if (!rc) {
		if (ordinal < 0 || ordinal >= device_count)
			rc = INVALID_DEVICE;
		else
			*d = ordinal;
	}
	END("ordinal=%d", ordinal);
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	BEGIN("cuDeviceGetName", 1, 0);
	if (!rc) {
		if (d < 0 || d >= device_count)
			rc = INVALID_DEVICE;
		else if (len <= 0 || !name)
			rc = INVALID_VALUE;
		else
			snprintf(name, (size_t)len, "Fake CUDA Device %d", d);
	}
	END("len=%d dev=%d", len, d);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
	BEGIN("cuDeviceTotalMem_v2", 1, 0);
	if (!rc) {
		if (d < 0 || d >= device_count)
			rc = INVALID_DEVICE;
		else
			*bytes = total_mem;
	}
	END("dev=%d", d);
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	BEGIN("cuDeviceGetAttribute", 1, 0);
	if (!rc) {
		init_attributes();
		if (d < 0 || d >= device_count)
			rc = INVALID_DEVICE;
		else if (attr <= 0 || attr >= 256)
			rc = INVALID_VALUE;
		else
			*v = attributes[attr];
	}
	END("attr=%d dev=%d", attr, d);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d)
{
	BEGIN("cuDevicePrimaryCtxRetain", 1, 0);
	if (!rc) {
		if (d < 0 || d >= device_count)
			rc = INVALID_DEVICE;
		else {
			primary.refs++;
			*ctx = &primary;
		}
	}
	END("dev=%d", d);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	BEGIN("cuDevicePrimaryCtxRelease_v2", 1, 0);
	if (!rc) {
		if (d < 0 || d >= device_count)
			rc = INVALID_DEVICE;
		else if (primary.refs == 0)
			rc = INVALID_CONTEXT;
		else
			primary.refs--;
	}
	END("dev=%d", d);
}

EXPORT CUresult cuCtxSetCurrent(void *ctx)
{
	BEGIN("cuCtxSetCurrent", 1, 0);
	if (!rc) {
		if (ctx != NULL && ctx != &primary)
			rc = INVALID_CONTEXT;
		else
			cur_ctx = ctx;
	}
	END("ctx=%p", ctx);
}

EXPORT CUresult cuCtxSynchronize(void)
{
	BEGIN("cuCtxSynchronize", 1, 1);
	if (!rc)
		rc = unsafe_call();
	END("");
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	BEGIN("cuMemAlloc_v2", 1, 1);
	if (!rc)
		rc = unsafe_call();
	if (!rc) {
		if (n == 0 || !p)
			rc = INVALID_VALUE;
		else if (n > total_mem - allocated)
			rc = OUT_OF_MEMORY;
		else {
			size_t padded = (n + 255) / 256 * 256;
			unsigned char *m = aligned_alloc(256, padded);
			if (!m)
				rc = OUT_OF_MEMORY;
			else {
				struct alloc *a = malloc(sizeof *a);
				*a = (struct alloc){m, n, allocs};
				allocs = a;
				allocated += n;
				live_allocs++;
				*p = (CUdeviceptr)(uintptr_t)m;
			}
		}
	}
	END("size=%zu ptr=0x%llx", n, (!rc && p) ? *p : 0ull);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	BEGIN("cuMemFree_v2", 1, 1);
	if (!rc)
		rc = unsafe_call();
	if (!rc) {
		struct alloc **pp = &allocs;
		while (*pp && (*pp)->p != (unsigned char *)(uintptr_t)p)
			pp = &(*pp)->next;
		if (!*pp)
			rc = INVALID_VALUE;
		else {
			struct alloc *a = *pp;
			*pp = a->next;
			allocated -= a->n;
			live_allocs--;
			free(a->p);
			free(a);
		}
	}
	END("ptr=0x%llx", p);
}

EXPORT CUresult cuMemGetInfo_v2(size_t *freeb, size_t *total)
{
	BEGIN("cuMemGetInfo_v2", 1, 1);
	if (!rc) {
		*freeb = total_mem - allocated;
		*total = total_mem;
	}
	END("");
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	BEGIN("cuMemcpyDtoD_v2", 1, 1);
	if (!rc)
		rc = unsafe_call();
	if (!rc)
		rc = run_node(&(struct node){.kind = NODE_COPY, .dst = dst, .src = src, .n = n});
	END("dst=0x%llx src=0x%llx size=%zu", dst, src, n);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, struct stream *s)
{
	BEGIN("cuMemcpyDtoDAsync_v2", 1, 1);
	if (!rc && !find_stream(s))
		rc = INVALID_HANDLE;
	if (!rc)
		rc = submit(s, (struct node){.kind = NODE_COPY, .dst = dst, .src = src, .n = n});
	END("dst=0x%llx src=0x%llx size=%zu stream=%p", dst, src, n, (void *)s);
}

/* pageable_copy checks the host-side copies: they may not enter a capture. */
static CUresult pageable_copy(struct stream *s)
{
	if (!find_stream(s))
		return INVALID_HANDLE;
	if (s && s->capturing) {
		struct stream *r = root_of(s);
		if (r->invalidated)
			return CAPTURE_INVALIDATED;
		r->invalidated = 1;
		return CAPTURE_UNSUPPORTED;
	}
	return OK;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, struct stream *s)
{
	BEGIN("cuMemcpyHtoDAsync_v2", 1, 1);
	if (!rc)
		rc = pageable_copy(s);
	if (!rc) {
		if (!dev_range_ok(dst, n) || (!src && n))
			rc = INVALID_VALUE;
		else
			memcpy((void *)(uintptr_t)dst, src, n);
	}
	END("dst=0x%llx size=%zu stream=%p", dst, n, (void *)s);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, struct stream *s)
{
	BEGIN("cuMemcpyDtoHAsync_v2", 1, 1);
	if (!rc)
		rc = pageable_copy(s);
	if (!rc) {
		if (!dev_range_ok(src, n) || (!dst && n))
			rc = INVALID_VALUE;
		else
			memcpy(dst, (void *)(uintptr_t)src, n);
	}
	END("src=0x%llx size=%zu stream=%p", src, n, (void *)s);
}

#ifndef FAKE_NO_MEMSET
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, struct stream *s)
{
	BEGIN("cuMemsetD8Async", 1, 1);
	if (!rc && !find_stream(s))
		rc = INVALID_HANDLE;
	if (!rc)
		rc = submit(s, (struct node){.kind = NODE_SET, .dst = dst, .n = n, .value = v});
	END("dst=0x%llx value=%u size=%zu stream=%p", dst, (unsigned)v, n, (void *)s);
}
#endif

EXPORT CUresult cuStreamCreate(struct stream **out, unsigned int flags)
{
	BEGIN("cuStreamCreate", 1, 1);
	if (!rc) {
		if (flags > 1)
			rc = INVALID_VALUE;
		else {
			struct stream *s = calloc(1, sizeof *s);
			s->next = streams;
			streams = s;
			live_streams++;
			*out = s;
		}
	}
	END("flags=%u stream=%p", flags, rc ? NULL : (void *)*out);
}

EXPORT CUresult cuStreamDestroy_v2(struct stream *s)
{
	BEGIN("cuStreamDestroy_v2", 1, 1);
	if (!rc && (s == NULL || !find_stream(s)))
		rc = INVALID_HANDLE;
	if (!rc && s->capturing) {
		root_of(s)->invalidated = 1;
		rc = CAPTURE_UNSUPPORTED;
	}
	if (!rc) {
		struct stream **pp = &streams;
		while (*pp != s)
			pp = &(*pp)->next;
		*pp = s->next;
		free(s->nodes.v);
		free(s);
		live_streams--;
	}
	END("stream=%p", (void *)s);
}

EXPORT CUresult cuStreamSynchronize(struct stream *s)
{
	BEGIN("cuStreamSynchronize", 1, 1);
	if (!rc && !find_stream(s))
		rc = INVALID_HANDLE;
	if (!rc && s && s->capturing) {
		root_of(s)->invalidated = 1;
		rc = CAPTURE_UNSUPPORTED;
	}
	END("stream=%p", (void *)s);
}

static int find_event(struct event *e)
{
	for (struct event *x = events; x; x = x->next)
		if (x == e)
			return 1;
	return 0;
}

EXPORT CUresult cuEventCreate(struct event **out, unsigned int flags)
{
	BEGIN("cuEventCreate", 1, 1);
	if (!rc) {
		struct event *e = calloc(1, sizeof *e);
		e->next = events;
		events = e;
		live_events++;
		*out = e;
	}
	END("flags=%u event=%p", flags, rc ? NULL : (void *)*out);
}

EXPORT CUresult cuEventDestroy_v2(struct event *e)
{
	BEGIN("cuEventDestroy_v2", 1, 1);
	if (!rc && !find_event(e))
		rc = INVALID_HANDLE;
	if (!rc) {
		struct event **pp = &events;
		while (*pp != e)
			pp = &(*pp)->next;
		*pp = e->next;
		free(e);
		live_events--;
	}
	END("event=%p", (void *)e);
}

EXPORT CUresult cuEventRecord(struct event *e, struct stream *s)
{
	BEGIN("cuEventRecord", 1, 1);
	if (!rc && (!find_event(e) || !find_stream(s)))
		rc = INVALID_HANDLE;
	if (!rc) {
		if (s && s->capturing) {
			if (root_of(s)->invalidated)
				rc = CAPTURE_INVALIDATED;
			else {
				e->captured = 1;
				e->root = root_of(s);
				e->recorder = s;
			}
		} else {
			e->captured = 0;
			e->root = e->recorder = NULL;
		}
	}
	END("event=%p stream=%p", (void *)e, (void *)s);
}

EXPORT CUresult cuEventQuery(struct event *e)
{
	BEGIN("cuEventQuery", 1, 1);
	if (!rc && !find_event(e))
		rc = INVALID_HANDLE;
	if (!rc && e->captured)
		rc = CAPTURED_EVENT;
	END("event=%p", (void *)e);
}

EXPORT CUresult cuEventSynchronize(struct event *e)
{
	BEGIN("cuEventSynchronize", 1, 1);
	if (!rc && !find_event(e))
		rc = INVALID_HANDLE;
	if (!rc && e->captured)
		rc = CAPTURED_EVENT;
	END("event=%p", (void *)e);
}

EXPORT CUresult cuStreamWaitEvent(struct stream *s, struct event *e, unsigned int flags)
{
	BEGIN("cuStreamWaitEvent", 1, 1);
	if (!rc && (!find_event(e) || !find_stream(s)))
		rc = INVALID_HANDLE;
	if (!rc && flags != 0)
		rc = INVALID_VALUE;
	if (!rc) {
		int live_capture = e->captured && e->root->capturing;
		if (s && s->capturing) {
			struct stream *r = root_of(s);
			if (r->invalidated)
				rc = CAPTURE_INVALIDATED;
			else if (!live_capture || e->root != r) {
				r->invalidated = 1;
				rc = CAPTURE_ISOLATION;
			} else if (s == r && e->recorder && e->recorder->origin == r)
				e->recorder->joined = 1; /* the origin joins a fork back */
		} else if (live_capture) {
			if (e->root->invalidated)
				rc = CAPTURE_INVALIDATED;
			else if (s == NULL)
				rc = CAPTURE_UNSUPPORTED; /* legacy stream cannot join */
			else {
				s->capturing = 1; /* fork: s joins the capture */
				s->origin = e->root;
				s->mode = e->root->mode;
				s->begin_tid = e->root->begin_tid;
				s->joined = 0;
			}
		}
	}
	END("stream=%p event=%p flags=%u", (void *)s, (void *)e, flags);
}

EXPORT CUresult cuStreamBeginCapture_v2(struct stream *s, int mode)
{
	BEGIN("cuStreamBeginCapture_v2", 1, 1);
	if (!rc && !find_stream(s))
		rc = INVALID_HANDLE;
	if (!rc && s == NULL)
		rc = CAPTURE_UNSUPPORTED;
	if (!rc && (mode < MODE_GLOBAL || mode > MODE_RELAXED))
		rc = INVALID_VALUE;
	if (!rc && s->capturing)
		rc = ILLEGAL_STATE;
	if (!rc) {
		s->capturing = 1;
		s->invalidated = 0;
		s->mode = mode;
		s->begin_tid = tid();
		s->origin = NULL;
		s->nodes = (struct nodes){0};
	}
	END("stream=%p mode=%d", (void *)s, mode);
}

EXPORT CUresult cuStreamEndCapture(struct stream *s, struct graph **out)
{
	BEGIN("cuStreamEndCapture", 1, 1);
	if (!rc && (s == NULL || !find_stream(s)))
		rc = INVALID_HANDLE;
	if (!rc && (!s->capturing || s->origin))
		rc = CAPTURE_UNMATCHED;
	if (!rc && s->mode != MODE_RELAXED && s->begin_tid != tid())
		rc = CAPTURE_WRONG_THREAD;
	if (!rc) {
		*out = NULL;
		int unjoined = 0;
		for (struct stream *x = streams; x; x = x->next)
			if (x->origin == s && !x->joined)
				unjoined = 1;
		if (s->invalidated)
			rc = CAPTURE_INVALIDATED;
		else if (unjoined)
			rc = CAPTURE_UNJOINED;
		else {
			struct graph *g = calloc(1, sizeof *g);
			g->nodes = nodes_copy(&s->nodes);
			g->next = graphs;
			graphs = g;
			live_graphs++;
			*out = g;
		}
		end_capture(s);
	}
	END("stream=%p graph=%p", (void *)s, (!rc && out) ? (void *)*out : NULL);
}

EXPORT CUresult cuStreamIsCapturing(struct stream *s, int *status)
{
	BEGIN("cuStreamIsCapturing", 1, 1);
	if (!rc && !find_stream(s))
		rc = INVALID_HANDLE;
	if (!rc) {
		if (s == NULL || !s->capturing)
			*status = 0;
		else
			*status = root_of(s)->invalidated ? 2 : 1;
	}
	END("stream=%p status=%d", (void *)s, rc ? -1 : *status);
}

static struct graph *unlink_graph(struct graph **list, struct graph *g)
{
	for (struct graph **pp = list; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			return g;
		}
	return NULL;
}

static int find_graph(struct graph *list, struct graph *g)
{
	for (; list; list = list->next)
		if (list == g)
			return 1;
	return 0;
}

EXPORT CUresult cuGraphInstantiateWithFlags(struct graph **out, struct graph *g, unsigned long long flags)
{
	BEGIN("cuGraphInstantiateWithFlags", 1, 1);
	if (!rc && !find_graph(graphs, g))
		rc = INVALID_HANDLE;
	if (!rc) {
		struct graph *x = calloc(1, sizeof *x);
		x->nodes = nodes_copy(&g->nodes);
		x->next = execs;
		execs = x;
		live_execs++;
		*out = x;
	}
	END("graph=%p flags=%llu nodes=%zu exec=%p", (void *)g, flags, rc ? (size_t)0 : g->nodes.len,
	    rc ? NULL : (void *)*out);
}

#ifndef FAKE_OMIT_GRAPH_LAUNCH
EXPORT CUresult cuGraphLaunch(struct graph *x, struct stream *s)
{
	BEGIN("cuGraphLaunch", 1, 1);
	if (!rc && (!find_graph(execs, x) || !find_stream(s)))
		rc = INVALID_HANDLE;
	for (size_t i = 0; !rc && i < x->nodes.len; i++)
		rc = submit(s, x->nodes.v[i]);
	END("exec=%p stream=%p", (void *)x, (void *)s);
}
#endif

EXPORT CUresult cuGraphExecDestroy(struct graph *x)
{
	BEGIN("cuGraphExecDestroy", 1, 1);
	if (!rc && !unlink_graph(&execs, x))
		rc = INVALID_HANDLE;
	if (!rc) {
		free(x->nodes.v);
		free(x);
		live_execs--;
	}
	END("exec=%p", (void *)x);
}

EXPORT CUresult cuGraphDestroy(struct graph *g)
{
	BEGIN("cuGraphDestroy", 1, 1);
	if (!rc && !unlink_graph(&graphs, g))
		rc = INVALID_HANDLE;
	if (!rc) {
		free(g->nodes.v);
		free(g);
		live_graphs--;
	}
	END("graph=%p", (void *)g);
}

/* ---- modules and libraries ----
 *
 * The fake "JIT" reads PTX only: it checks the .version directive, that
 * braces balance and that every .entry has a parameter list it can read,
 * and reports what it finds wrong in the error log buffer the caller passed
 * (CU_JIT_ERROR_LOG_BUFFER and _SIZE_BYTES), in ptxas's format.  A cubin or
 * fatbin (ELF or fatbin magic) is refused with CUDA_ERROR_NO_BINARY_FOR_GPU
 * and a log saying the fake runs PTX only.
 *
 * When the check runs follows the real driver's lazy module loading (the
 * default since CUDA 12.2): cuLibraryLoadData accepts any image and checks
 * it at the first cuLibraryGetKernel, with no log (the load's log buffer is
 * gone by then), as a CUDA 13.0 driver did with a PTX whose body is never
 * closed; cuModuleLoadDataEx checks it in the call.  Built with
 * -DFAKE_LAZY_JIT, cuModuleLoadDataEx defers the check to the first
 * cuModuleGetFunction too, writing the log into the buffer the load's
 * options named (a driver that keeps them), so the tests see LoadModule
 * resolve every entry before it returns. */

static const char *skip_space(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

static int line_of(const char *image, const char *p)
{
	int line = 1;
	for (const char *q = image; q < p; q++)
		line += *q == '\n';
	return line;
}

/* find_entry returns the start of ".entry <name>" followed by "(" or "{",
 * or NULL. */
static const char *find_entry(const char *image, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = strstr(image, ".entry"); p; p = strstr(p + 1, ".entry")) {
		const char *q = skip_space(p + 6);
		if (q != p + 6 && strncmp(q, name, n) == 0) {
			q = skip_space(q + n);
			if (*q == '(' || *q == '{')
				return p;
		}
	}
	return NULL;
}

/* parse_params reads the parameter list of the entry at p into sizes and
 * offsets (each aligned to its size, up to 8, or its .align); it returns
 * the count, or -1 with *why set and *at at the offending text. */
static int parse_params(const char *p, size_t *size, size_t *off, const char **why, const char **at)
{
	p = skip_space(p + 6);
	while (*p && *p != '(' && *p != '{')
		p++;
	if (*p != '(')
		return 0;
	const char *end = strchr(p, ')');
	if (!end) {
		*why = "Parameter list is not closed";
		*at = p;
		return -1;
	}
	int count = 0;
	size_t next = 0;
	for (const char *d = skip_space(p + 1); d < end; d = skip_space(d)) {
		if (count == MAX_PARAMS) {
			*why = "More parameters than the fake driver supports";
			*at = d;
			return -1;
		}
		if (strncmp(d, ".param", 6) != 0) {
			*why = "Expected .param";
			*at = d;
			return -1;
		}
		d += 6;
		size_t elem = 0, align = 0, mult = 1;
		for (;;) {
			d = skip_space(d);
			if (d >= end || *d == ',')
				break;
			char tok[64];
			int n = 0;
			while (d < end && *d != ',' && *d != ' ' && *d != '\t' && *d != '\n' && *d != '\r' && n < 63)
				tok[n++] = *d++;
			tok[n] = 0;
			if (!strcmp(tok, ".align")) {
				d = skip_space(d);
				align = strtoul(d, (char **)&d, 10);
			} else if (!strcmp(tok, ".ptr") || !strcmp(tok, ".global") || !strcmp(tok, ".const") ||
				   !strcmp(tok, ".shared") || !strcmp(tok, ".local")) {
			} else if (tok[0] == '.' && strchr("usbf", tok[1])) {
				int bits = atoi(tok + 2);
				if (bits != 8 && bits != 16 && bits != 32 && bits != 64) {
					*why = "Unknown parameter type";
					*at = d - n;
					return -1;
				}
				elem = (size_t)bits / 8;
			} else if (tok[0] != '.' && elem) {
				char *br = strchr(tok, '[');
				if (br)
					mult = strtoul(br + 1, NULL, 10);
			} else {
				*why = "Unknown parameter type";
				*at = d - n;
				return -1;
			}
		}
		if (!elem) {
			*why = "Parameter without a type";
			*at = d;
			return -1;
		}
		if (!align)
			align = elem < 8 ? elem : 8;
		next = (next + align - 1) / align * align;
		off[count] = next;
		size[count] = elem * mult;
		next += size[count];
		count++;
		if (*d == ',')
			d++;
	}
	return count;
}

/* jit checks an image and returns OK, or an error with the log written. */
static CUresult jit(const char *img, char *log, size_t *logsize)
{
	char msg[256] = "";
	CUresult rc = OK;
	const unsigned char *u = (const unsigned char *)img;
	if ((u[0] == 0x7f && u[1] == 'E' && u[2] == 'L' && u[3] == 'F') ||
	    (u[0] == 0x50 && u[1] == 0xed && u[2] == 0x55 && u[3] == 0xba)) {
		snprintf(msg, sizeof msg, "fake driver: binary images (cubin, fatbin) are not supported, only PTX");
		rc = 209; /* CUDA_ERROR_NO_BINARY_FOR_GPU */
	} else if (!strstr(img, ".version")) {
		rc = INVALID_IMAGE; /* not PTX at all: no log, as the driver */
	} else if (!strstr(img, ".entry")) {
		snprintf(msg, sizeof msg, "ptxas application ptx input, line 1; error   : No .entry in the module");
		rc = INVALID_PTX;
	} else {
		int depth = 0;
		const char *open = NULL;
		for (const char *p = img; *p && !rc; p++) {
			if (p[0] == '/' && p[1] == '/') {
				while (*p && *p != '\n')
					p++;
				if (!*p)
					break;
			} else if (*p == '{') {
				if (depth++ == 0)
					open = p;
			} else if (*p == '}' && --depth < 0) {
				snprintf(msg, sizeof msg, "ptxas application ptx input, line %d; error   : Unexpected '}'", line_of(img, p));
				rc = INVALID_PTX;
			}
		}
		if (!rc && depth > 0) {
			snprintf(msg, sizeof msg, "ptxas application ptx input, line %d; error   : Unclosed '{' at end of input", line_of(img, open));
			rc = INVALID_PTX;
		}
		for (const char *p = strstr(img, ".entry"); p && !rc; p = strstr(p + 1, ".entry")) {
			size_t size[MAX_PARAMS], off[MAX_PARAMS];
			const char *why = NULL, *at = NULL;
			if (parse_params(p, size, off, &why, &at) < 0) {
				snprintf(msg, sizeof msg, "ptxas application ptx input, line %d; error   : %s", line_of(img, at), why);
				rc = INVALID_PTX;
			}
		}
	}
	if (rc && log && logsize && *logsize) {
		size_t n = strlen(msg);
		if (n >= *logsize)
			n = *logsize - 1;
		memcpy(log, msg, n);
		log[n] = 0;
		*logsize = n + 1;
	}
	return rc;
}

/* jit_log finds the error log buffer among JIT options. */
static void jit_log(unsigned nopts, const int *opts, void **vals, char **log, size_t **logsize)
{
	*log = NULL;
	*logsize = NULL;
	for (unsigned i = 0; opts && vals && i < nopts; i++) {
		if (opts[i] == 5) /* CU_JIT_ERROR_LOG_BUFFER */
			*log = vals[i];
		else if (opts[i] == 6) /* CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: the value is the size, in and out */
			*logsize = (size_t *)&vals[i];
	}
}

/* load makes a module of image; lazy defers the check to the first lookup,
 * keeping the log buffer the options name when keep_log is set. */
static CUresult load(struct module **out, const void *image, unsigned nopts, int *opts, void **vals, int library, int lazy,
		     int keep_log)
{
	const char *img = image;
	char *log;
	size_t *logsize;
	jit_log(nopts, opts, vals, &log, &logsize);
	if (!img)
		return INVALID_VALUE;
	if (!lazy) {
		CUresult rc = jit(img, log, logsize);
		if (rc)
			return rc;
	}
	struct module *m = calloc(1, sizeof *m);
	m->image = strdup(img);
	m->library = library;
	m->jitted = !lazy;
	if (lazy && keep_log && log && logsize) {
		m->log = log;
		m->logsize = *logsize;
	}
	m->next = modules;
	modules = m;
	live_modules++;
	*out = m;
	return OK;
}

EXPORT CUresult cuModuleLoadDataEx(struct module **out, const void *image, unsigned nopts, int *opts, void **vals)
{
	BEGIN("cuModuleLoadDataEx", 1, 1);
	if (!rc)
#ifdef FAKE_LAZY_JIT
		rc = load(out, image, nopts, opts, vals, 0, 1, 1);
#else
		rc = load(out, image, nopts, opts, vals, 0, 0, 0);
#endif
	END("size=%zu options=%u module=%p", image ? strlen(image) : 0, nopts, rc ? NULL : (void *)*out);
}

static int find_module(struct module *m, int library)
{
	for (struct module *x = modules; x; x = x->next)
		if (x == m)
			return x->library == library;
	return 0;
}

/* get_function makes the function (or kernel) for entry name of m. */
static CUresult get_function(struct function **out, struct module *m, const char *name)
{
	if (!m->jitted) { /* loaded lazily: the check runs now, once */
		size_t n = m->logsize;
		CUresult rc = jit(m->image, m->log, m->log ? &n : NULL);
		if (rc)
			return rc;
		m->jitted = 1;
	}
	const char *e = name ? find_entry(m->image, name) : NULL;
	if (!e)
		return NOT_FOUND;
	struct function *f = calloc(1, sizeof *f);
	const char *why, *at;
	f->mod = m;
	f->nparams = parse_params(e, f->psize, f->poff, &why, &at);
	if (f->nparams < 0) /* not after jit(), which refused such an image */
		f->nparams = 0;
	for (int k = 1; k < K_COUNT; k++) {
		if (strcmp(name, kernels[k].name) || kernels[k].nparams != f->nparams)
			continue;
		int same = 1;
		for (int i = 0; i < f->nparams; i++)
			same &= kernels[k].size[i] == f->psize[i];
		if (same)
			f->kernel = k;
	}
	f->next = functions;
	functions = f;
	*out = f;
	return OK;
}

EXPORT CUresult cuModuleGetFunction(struct function **out, struct module *m, const char *name)
{
	BEGIN("cuModuleGetFunction", 1, 1);
	if (!rc && !find_module(m, 0))
		rc = INVALID_HANDLE;
	if (!rc)
		rc = get_function(out, m, name);
	END("module=%p name=%s", (void *)m, name ? name : "");
}

static void unload(struct module *m)
{
	for (struct function **pp = &functions; *pp;) {
		if ((*pp)->mod == m) {
			struct function *f = *pp;
			*pp = f->next;
			free(f);
		} else
			pp = &(*pp)->next;
	}
	struct module **pp = &modules;
	while (*pp != m)
		pp = &(*pp)->next;
	*pp = m->next;
	free(m->image);
	free(m);
	live_modules--;
}

EXPORT CUresult cuModuleUnload(struct module *m)
{
	BEGIN("cuModuleUnload", 1, 1);
	if (!rc && !find_module(m, 0))
		rc = INVALID_HANDLE;
	if (!rc)
		unload(m);
	END("module=%p", (void *)m);
}

static struct function *find_function(struct function *f)
{
	for (struct function *x = functions; x; x = x->next)
		if (x == f)
			return x;
	return NULL;
}

#ifndef FAKE_NO_LIBRARY
/* The library API (CUDA 12.0+, optional): context-independent, so loading
 * needs no current context; cuKernelGetFunction does. */
EXPORT CUresult cuLibraryLoadData(struct module **out, const void *code, int *jit_opts, void **jit_vals, unsigned njit,
				  int *lib_opts, void **lib_vals, unsigned nlib)
{
	BEGIN("cuLibraryLoadData", 1, 0);
	(void)lib_opts;
	(void)lib_vals;
	if (!rc)
		rc = load(out, code, njit, jit_opts, jit_vals, 1, 1, 0);
	END("size=%zu options=%u library=%p", code ? strlen(code) : 0, njit + nlib, rc ? NULL : (void *)*out);
}

EXPORT CUresult cuLibraryGetKernel(struct function **out, struct module *lib, const char *name)
{
	BEGIN("cuLibraryGetKernel", 1, 0);
	if (!rc && !find_module(lib, 1))
		rc = INVALID_HANDLE;
	if (!rc)
		rc = get_function(out, lib, name);
	END("library=%p name=%s", (void *)lib, name ? name : "");
}

EXPORT CUresult cuKernelGetFunction(struct function **out, struct function *k)
{
	BEGIN("cuKernelGetFunction", 1, 1);
	if (!rc && (!find_function(k) || !k->mod->library))
		rc = INVALID_HANDLE;
	if (!rc)
		*out = k;
	END("kernel=%p", (void *)k);
}

EXPORT CUresult cuLibraryUnload(struct module *lib)
{
	BEGIN("cuLibraryUnload", 1, 0);
	if (!rc && !find_module(lib, 1))
		rc = INVALID_HANDLE;
	if (!rc)
		unload(lib);
	END("library=%p", (void *)lib);
}
#endif

EXPORT CUresult cuLaunchKernel(struct function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shared, struct stream *s, void **params, void **extra)
{
	BEGIN("cuLaunchKernel", 1, 1);
	if (!rc && (!find_function(f) || !find_stream(s)))
		rc = INVALID_HANDLE;
	if (!rc && (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || (unsigned long long)bx * by * bz > 1024))
		rc = INVALID_VALUE;
	if (!rc && shared > 48u << 10)
		rc = INVALID_VALUE; /* more dynamic shared memory than a block may have without opting in */
	if (!rc && ((f->nparams > 0 && params == NULL) || extra != NULL))
		rc = INVALID_VALUE;
	char args[512] = "";
	if (!rc) {
		struct node n = {.kind = NODE_KERNEL, .kernel = f->kernel, .nparams = f->nparams, .shared = shared};
		n.block = (unsigned long long)bx * by * bz;
		n.threads = (unsigned long long)gx * gy * gz * n.block;
		int len = 0;
		for (int i = 0; i < f->nparams; i++) {
			/* Like the driver, read the width the kernel declares,
			 * whatever the caller passed. */
			size_t sz = f->psize[i] < 8 ? f->psize[i] : 8;
			memcpy(n.params[i], params[i], sz);
			unsigned long long v = 0;
			memcpy(&v, params[i], sz);
			len += snprintf(args + len, sizeof args - len, " p%d=0x%llx", i, v);
		}
		rc = f->kernel == K_UNKNOWN ? 801 : submit(s, n);
	}
	END("kernel=%s grid=%ux%ux%u block=%ux%ux%u shared=%u stream=%p%s", f && !rc ? kernels[f->kernel].name : "?",
	    gx, gy, gz, bx, by, bz, shared, (void *)s, args);
}

#ifndef FAKE_NO_PARAM_INFO
/* cuFuncGetParamInfo (CUDA 12.4+, optional): offset and size of a
 * parameter as the PTX declares it; INVALID_VALUE past the last one. */
EXPORT CUresult cuFuncGetParamInfo(struct function *f, size_t index, size_t *offset, size_t *size)
{
	BEGIN("cuFuncGetParamInfo", 1, 1);
	if (!rc && !find_function(f))
		rc = INVALID_HANDLE;
	if (!rc && (offset == NULL || size == NULL))
		rc = INVALID_VALUE;
	if (!rc && index >= (size_t)f->nparams)
		rc = INVALID_VALUE;
	if (!rc) {
		*offset = f->poff[index];
		*size = f->psize[index];
	}
	END("function=%p index=%zu", (void *)f, index);
}
#endif

EXPORT CUresult cuGetErrorName(CUresult code, const char **out)
{
	static const struct {
		int code;
		const char *name;
	} names[] = {
		{0, "CUDA_SUCCESS"},
		{1, "CUDA_ERROR_INVALID_VALUE"},
		{2, "CUDA_ERROR_OUT_OF_MEMORY"},
		{3, "CUDA_ERROR_NOT_INITIALIZED"},
		{100, "CUDA_ERROR_NO_DEVICE"},
		{101, "CUDA_ERROR_INVALID_DEVICE"},
		{200, "CUDA_ERROR_INVALID_IMAGE"},
		{201, "CUDA_ERROR_INVALID_CONTEXT"},
		{214, "CUDA_ERROR_ECC_UNCORRECTABLE"},
		{209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
		{218, "CUDA_ERROR_INVALID_PTX"},
		{400, "CUDA_ERROR_INVALID_HANDLE"},
		{401, "CUDA_ERROR_ILLEGAL_STATE"},
		{500, "CUDA_ERROR_NOT_FOUND"},
		{600, "CUDA_ERROR_NOT_READY"},
		{700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{710, "CUDA_ERROR_ASSERT"},
		{714, "CUDA_ERROR_HARDWARE_STACK_ERROR"},
		{715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
		{716, "CUDA_ERROR_MISALIGNED_ADDRESS"},
		{717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"},
		{718, "CUDA_ERROR_INVALID_PC"},
		{719, "CUDA_ERROR_LAUNCH_FAILED"},
		{900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
		{901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
		{902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"},
		{903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"},
		{904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
		{905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"},
		{906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
		{907, "CUDA_ERROR_CAPTURED_EVENT"},
		{908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
		{801, "CUDA_ERROR_NOT_SUPPORTED"},
		{999, "CUDA_ERROR_UNKNOWN"},
	};
	/* Like the driver, no initialisation or context needed; not logged. */
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].code == code) {
			*out = names[i].name;
			return OK;
		}
	*out = NULL;
	return INVALID_VALUE;
}

/* ================= virtual memory (optional) ================= */

#ifndef FAKE_NO_VMM

typedef struct {
	int type; /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
	int requested_handle_types;
	int loc_type; /* CU_MEM_LOCATION_TYPE_DEVICE = 1 */
	int loc_id;
	void *win32_metadata;
	unsigned char compression_type, rdma_capable;
	unsigned short usage;
	unsigned char reserved[4];
} CUmemAllocationProp;

typedef struct {
	int loc_type;
	int loc_id;
	int flags; /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 */
} CUmemAccessDesc;

_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp layout");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc layout");

static int prop_ok(const CUmemAllocationProp *p)
{
	return p && p->type == 1 && p->loc_type == 1 && p->loc_id >= 0 && p->loc_id < device_count;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option)
{
	BEGIN("cuMemGetAllocationGranularity", 1, 1);
	if (!rc && (!prop_ok(prop) || option < 0 || option > 1))
		rc = INVALID_VALUE;
	if (!rc)
		*g = option == 0 ? GRANULARITY : 2 * GRANULARITY;
	END("option=%d type=%d loc=%d:%d", option, prop ? prop->type : -1, prop ? prop->loc_type : -1,
	    prop ? prop->loc_id : -1);
}

/* reserve_range maps size bytes aligned to align, untouched (zero on first
 * read, no host memory until written). */
static unsigned char *reserve_range(size_t size, size_t align)
{
	size_t span = size + align;
	unsigned char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	uintptr_t a = ((uintptr_t)m + align - 1) / align * align;
	unsigned char *b = (unsigned char *)a;
	if (b > m)
		munmap(m, (size_t)(b - m));
	if (b + size < m + span)
		munmap(b + size, (size_t)(m + span - (b + size)));
	return b;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags)
{
	BEGIN("cuMemAddressReserve", 1, 1);
	if (!rc && (size == 0 || size % GRANULARITY || (align && align % GRANULARITY) || flags != 0))
		rc = INVALID_VALUE;
	if (!rc) {
		unsigned char *b = reserve_range(size, align ? align : GRANULARITY);
		if (!b)
			rc = OUT_OF_MEMORY;
		else {
			struct reservation *r = malloc(sizeof *r);
			*r = (struct reservation){b, size, reservations};
			reservations = r;
			*p = (CUdeviceptr)(uintptr_t)b;
		}
	}
	END("size=%zu align=%zu addr=0x%llx ptr=0x%llx", size, align, addr, rc ? 0ull : *p);
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size)
{
	BEGIN("cuMemAddressFree", 1, 1);
	unsigned char *b = (unsigned char *)(uintptr_t)p;
	struct reservation **pp = &reservations;
	if (!rc) {
		while (*pp && !((*pp)->base == b && (*pp)->size == size))
			pp = &(*pp)->next;
		if (!*pp)
			rc = INVALID_VALUE;
		for (struct mapping *m = mappings; !rc && m; m = m->next)
			if (m->base >= b && m->base < b + size)
				rc = INVALID_VALUE; /* still mapped */
	}
	if (!rc) {
		struct reservation *r = *pp;
		*pp = r->next;
		munmap(r->base, r->size);
		free(r);
	}
	END("ptr=0x%llx size=%zu", p, size);
}

static void drop_physical(struct physical *h)
{
	if (!h->released || h->maps)
		return;
	for (struct physical **pp = &physicals; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	allocated -= h->size;
	free(h);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *out, size_t size, const CUmemAllocationProp *prop,
			    unsigned long long flags)
{
	BEGIN("cuMemCreate", 1, 1);
	if (!rc && (!prop_ok(prop) || size == 0 || size % GRANULARITY || flags != 0))
		rc = INVALID_VALUE;
	if (!rc && size > total_mem - allocated)
		rc = OUT_OF_MEMORY;
	if (!rc) {
		struct physical *h = calloc(1, sizeof *h);
		h->size = size;
		h->next = physicals;
		physicals = h;
		allocated += size;
		*out = (CUmemGenericAllocationHandle)(uintptr_t)h;
	}
	END("size=%zu type=%d loc=%d:%d", size, prop ? prop->type : -1, prop ? prop->loc_type : -1,
	    prop ? prop->loc_id : -1);
}

static struct physical *find_physical(CUmemGenericAllocationHandle hh)
{
	for (struct physical *h = physicals; h; h = h->next)
		if ((CUmemGenericAllocationHandle)(uintptr_t)h == hh && !h->released)
			return h;
	return NULL;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle hh)
{
	BEGIN("cuMemRelease", 1, 1);
	struct physical *h = NULL;
	if (!rc && !(h = find_physical(hh)))
		rc = INVALID_VALUE;
	if (!rc) {
		h->released = 1;
		drop_physical(h);
	}
	END("handle=0x%llx", hh);
}

EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle hh,
			 unsigned long long flags)
{
	BEGIN("cuMemMap", 1, 1);
	unsigned char *b = (unsigned char *)(uintptr_t)p;
	struct physical *h = NULL;
	if (!rc && (!(h = find_physical(hh)) || offset != 0 || flags != 0 || size == 0 || size > h->size ||
		    size % GRANULARITY || p % GRANULARITY))
		rc = INVALID_VALUE;
	if (!rc) {
		int inside = 0;
		for (struct reservation *r = reservations; r; r = r->next)
			if (b >= r->base && size <= r->size && (size_t)(b - r->base) <= r->size - size)
				inside = 1;
		for (struct mapping *m = mappings; m; m = m->next)
			if (b < m->base + m->size && m->base < b + size)
				inside = 0; /* overlaps a mapping */
		if (!inside)
			rc = INVALID_VALUE;
	}
	if (!rc) {
		struct mapping *m = calloc(1, sizeof *m);
		*m = (struct mapping){b, size, h, 0, mappings};
		mappings = m;
		h->maps++;
	}
	END("ptr=0x%llx size=%zu offset=%zu handle=0x%llx", p, size, offset, hh);
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	BEGIN("cuMemSetAccess", 1, 1);
	unsigned char *b = (unsigned char *)(uintptr_t)p;
	if (!rc && (!desc || count != 1 || desc[0].loc_type != 1 || desc[0].loc_id < 0 ||
		    desc[0].loc_id >= device_count || desc[0].flags < 0 || desc[0].flags > 3))
		rc = INVALID_VALUE;
	if (!rc) {
		size_t covered = 0;
		for (struct mapping *m = mappings; m; m = m->next)
			if (m->base >= b && m->base + m->size <= b + size)
				covered += m->size;
		if (covered != size)
			rc = INVALID_VALUE;
		else
			for (struct mapping *m = mappings; m; m = m->next)
				if (m->base >= b && m->base + m->size <= b + size)
					m->access = desc[0].flags;
	}
	END("ptr=0x%llx size=%zu count=%zu loc=%d:%d flags=%d", p, size, count, desc ? desc[0].loc_type : -1,
	    desc ? desc[0].loc_id : -1, desc ? desc[0].flags : -1);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size)
{
	BEGIN("cuMemUnmap", 1, 1);
	unsigned char *b = (unsigned char *)(uintptr_t)p;
	struct mapping **pp = &mappings;
	if (!rc) {
		while (*pp && !((*pp)->base == b && (*pp)->size == size))
			pp = &(*pp)->next;
		if (!*pp)
			rc = INVALID_VALUE;
	}
	if (!rc) {
		struct mapping *m = *pp;
		*pp = m->next;
		madvise(m->base, m->size, MADV_DONTNEED);
		m->h->maps--;
		drop_physical(m->h);
		free(m);
	}
	END("ptr=0x%llx size=%zu", p, size);
}

#endif /* FAKE_NO_VMM */

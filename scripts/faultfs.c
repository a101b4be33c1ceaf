// faultfs: an LD_PRELOAD shim that makes one write or sync to a regular file fail, the way a
// failing disk or a full one does, for the I/O-fault sweep (docs/reliability.md, "Every write
// may fail"; scripts/faultsweep.py, FaultSweepTests).
//
//   cc -shared -fPIC -O2 -o faultfs.so scripts/faultfs.c -ldl
//   FAULTFS_MATCH=people.db FAULTFS_AT=17 FAULTFS_MODE=eio LD_PRELOAD=./faultfs.so ingot run …
//
// Environment:
//   FAULTFS_MATCH  comma-separated substrings; a call counts when its file's path holds one
//                  (`name$`: ends with it); default: every regular file
//   FAULTFS_AT     the matching call that fails first (1-based; 0 or unset: none fails, count only)
//   FAULTFS_MODE   eio: that call alone fails with EIO; enospc: it and every later matching write
//                  fail with ENOSPC (a disk that fills up; syncs still succeed)
//   FAULTFS_REPORT a file that receives, at exit, the number of matching calls and, once a fault
//                  fired, the path it hit
//
// Calls covered: write, pwrite, pwrite64, writev, pwritev, fsync, fdatasync on regular files.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long fault_at = 0;
static int mode_enospc = 0;
static char match[1024];
static int match_all = 1;
static long calls = 0;
static char hit_path[4096];
static int initialised = 0;

static void init(void) {
    if (__atomic_load_n(&initialised, __ATOMIC_ACQUIRE)) return;
    const char *at = getenv("FAULTFS_AT");
    fault_at = at ? atol(at) : 0;
    const char *mode = getenv("FAULTFS_MODE");
    mode_enospc = mode && strcmp(mode, "enospc") == 0;
    const char *m = getenv("FAULTFS_MATCH");
    if (m && *m) {
        snprintf(match, sizeof match, "%s", m);
        match_all = 0;
    }
    __atomic_store_n(&initialised, 1, __ATOMIC_RELEASE);
}

// Whether the call on `fd` counts: a regular file whose path holds one of FAULTFS_MATCH.
static int counts(int fd, char *path, size_t size) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, size - 1);
    if (n < 0) return 0;
    path[n] = 0;
    if (match_all) return 1;
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", match);
    char *save = NULL;
    for (char *part = strtok_r(copy, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
        size_t n = strlen(part), len = strlen(path);
        if (n > 1 && part[n - 1] == '$') {
            // "people.db$": the path ends so (the database file alone, not its WAL).
            if (len >= n - 1 && strncmp(path + len - (n - 1), part, n - 1) == 0) return 1;
        } else if (*part && strstr(path, part)) {
            return 1;
        }
    }
    return 0;
}

// Whether this call fails (`sync`: an fsync or fdatasync, which a full disk does not fail).
static int fails(int fd, int sync) {
    init();
    char path[4096];
    if (!counts(fd, path, sizeof path)) return 0;
    long n = __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    if (fault_at <= 0) return 0;
    int fire = mode_enospc ? (n >= fault_at && !sync) : n == fault_at;
    if (fire) {
        if (!hit_path[0]) snprintf(hit_path, sizeof hit_path, "%s", path);
        errno = mode_enospc ? ENOSPC : EIO;
    }
    return fire;
}

__attribute__((destructor)) static void report(void) {
    const char *file = getenv("FAULTFS_REPORT");
    if (!file) return;
    FILE *out = fopen(file, "w");
    if (!out) return;
    fprintf(out, "calls=%ld\nhit=%s\n", __atomic_load_n(&calls, __ATOMIC_RELAXED), hit_path);
    fclose(out);
}

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwrite64_fn)(int, const void *, size_t, off64_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef int (*sync_fn)(int);

#define REAL(name, type) \
    static type real_##name; \
    if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write, write_fn);
    if (fails(fd, 0)) return -1;
    return real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite, pwrite_fn);
    if (fails(fd, 0)) return -1;
    return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    REAL(pwrite64, pwrite64_fn);
    if (fails(fd, 0)) return -1;
    return real_pwrite64(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    REAL(writev, writev_fn);
    if (fails(fd, 0)) return -1;
    return real_writev(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    REAL(pwritev, pwritev_fn);
    if (fails(fd, 0)) return -1;
    return real_pwritev(fd, iov, iovcnt, offset);
}

int fsync(int fd) {
    REAL(fsync, sync_fn);
    if (fails(fd, 1)) return -1;
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync, sync_fn);
    if (fails(fd, 1)) return -1;
    return real_fdatasync(fd);
}

/* The floor under any owned (NONE-mode) load, for `make bench-load`: what it costs this machine
 * to get a file's bytes into fresh anonymous memory, with no model library involved. Prints
 * "<ms> <peak_rss_kib> <minor_faults> <cpu_ms>" like bench_load.
 * usage: bench_floor FILE touch   anonymous memory of the file's size, one byte written per
 *                                 4 KiB page (the page faults), nothing read
 *        bench_floor FILE read    the file pread into such memory (the reads fault it in)
 *        bench_floor FILE populate  the same, each half first faulted in by one
 *                                 madvise(MADV_POPULATE_WRITE) (as the loader did without
 *                                 a page copier)
 *        bench_floor FILE copy    the memory registered with a userfaultfd and each half
 *                                 filled by UFFDIO_COPY calls of 64 MiB from a shared
 *                                 read-only mapping of the file (as the loader does where
 *                                 the kernel allows it: no page is zeroed first)
 * Both split the memory in two halves done by two threads, as the loader does on this
 * project's 2-core machine. If `touch` alone takes more than half of upstream's NONE load, no
 * owned load can be 0.5x upstream here. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <linux/userfaultfd.h>
#include "bench_report.h"
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older C headers lack the name */
#endif

struct part { int fd; char *p; size_t from, to; int read; int populate; int failed; int uffd; const char *src; };

static void *fill(void *arg) {
    struct part *t = arg;
    if (t->uffd >= 0) {
        for (size_t at = t->from; at < t->to;) {
            size_t want = t->to - at < (64u << 20) ? t->to - at : (64u << 20);
            struct uffdio_copy c = { (unsigned long) (t->p + at), (unsigned long) (t->src + at),
                                     (want + 4095) / 4096 * 4096, 0, 0 };
            if (ioctl(t->uffd, UFFDIO_COPY, &c) != 0 && c.copy <= 0) { t->failed = 1; return NULL; }
            at += c.copy > 0 ? (size_t) c.copy : 0;
        }
        return NULL;
    }
    if (!t->read) {
        for (size_t at = t->from; at < t->to; at += 4096) t->p[at] = 1;
        return NULL;
    }
    /* Advice only, as in the loader: where it is refused, the reads fault the pages in. */
    if (t->populate) madvise(t->p + t->from, t->to - t->from, MADV_POPULATE_WRITE);
    for (size_t at = t->from; at < t->to;) {
        size_t want = t->to - at < (64u << 20) ? t->to - at : (64u << 20);
        ssize_t got = pread(t->fd, t->p + at, want, (off_t) at);
        if (got <= 0) { t->failed = 1; return NULL; }
        at += (size_t) got;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) { perror(argv[1]); return 1; }
    size_t len = (size_t) st.st_size, half = len / 2 / 4096 * 4096;
    int populate = strcmp(argv[2], "populate") == 0;
    int copy = strcmp(argv[2], "copy") == 0;
    int read = populate || copy || strcmp(argv[2], "read") == 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    int uffd = -1;
    const char *src = NULL;
    if (copy) {
        src = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        uffd = (int) syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */);
        struct uffdio_api api = { UFFD_API, 0, 0 };
        struct uffdio_register reg = { { (unsigned long) p, (len + 4095) / 4096 * 4096 },
                                       UFFDIO_REGISTER_MODE_MISSING, 0 };
        if (src == MAP_FAILED || uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0
            || ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) {
            perror("userfaultfd");
            return 1;
        }
        madvise((void *) src, len, MADV_SEQUENTIAL);
    }
    struct part a = { fd, p, 0, half, read, populate, 0, uffd, src },
                b = { fd, p, half, len, read, populate, 0, uffd, src };
    pthread_t other;
    if (pthread_create(&other, NULL, fill, &b) != 0) return 1;
    fill(&a);
    pthread_join(other, NULL);
    if (a.failed || b.failed) { fprintf(stderr, "%s failed\n", copy ? "UFFDIO_COPY" : "pread"); return 1; }
    if (copy) {
        struct uffdio_range r = { (unsigned long) p, (len + 4095) / 4096 * 4096 };
        ioctl(uffd, UFFDIO_UNREGISTER, &r);
        close(uffd);
        munmap((void *) src, len);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    print_run_report(t0, t1);
    munmap(p, len);
    close(fd);
    return 0;
}

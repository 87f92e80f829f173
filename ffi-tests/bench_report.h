/* The one line that bench_load.c and bench_floor.c print per run, which
 * scripts/bench-load.sh reads: wall milliseconds since t0, peak RSS (KiB), minor page faults,
 * and CPU milliseconds (user + system) of the whole process. */
#ifndef BENCH_REPORT_H
#define BENCH_REPORT_H

#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

static void print_run_report(struct timespec t0, struct timespec t1) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3
                  + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
    printf("%.1f %ld %ld %.1f\n", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6,
           ru.ru_maxrss, ru.ru_minflt, cpu_ms);
}

#endif

/*
 * Compares two logits files written by probe_decode (upstream's first): per position the
 * KL divergence KL(upstream || ours) of the softmax distributions (in double), and whether
 * the top-1 tokens agree. Prints mean/max KL and top-1 agreement; exits 1 when the mean KL
 * exceeds MAX_KL or agreement is below MIN_TOP1.
 *
 * With MARGIN > 0, agreement is counted over the positions where upstream's top-1 logit leads
 * its runner-up by more than MARGIN (the raw agreement is printed too). Quantized models
 * quantize activations at every matrix product, so float differences far below 1e-5 flip
 * rounding steps and reorder near-ties; MARGIN keeps the check about real disagreements.
 *
 * usage: compare_logits UPSTREAM OURS MAX_KL MIN_TOP1 [MARGIN]  [env COMPARE_EXACT_ROWS=N:
 *        the first N rows must be bit-identical]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *load(const char *path, int *n_vocab, int *n_rows) {
    FILE *f = fopen(path, "rb");
    if (!f || fread(n_vocab, 4, 1, f) != 1 || fread(n_rows, 4, 1, f) != 1) return NULL;
    size_t n = (size_t) *n_vocab * *n_rows;
    float *v = malloc(n * sizeof *v);
    if (fread(v, sizeof *v, n, f) != n) return NULL;
    fclose(f);
    return v;
}

static void log_softmax(const float *x, int n, double *out) {
    double max = x[0];
    for (int i = 1; i < n; i++) if (x[i] > max) max = x[i];
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp(x[i] - max);
    double lse = max + log(sum);
    for (int i = 0; i < n; i++) out[i] = x[i] - lse;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: %s UPSTREAM OURS MAX_KL MIN_TOP1 [MARGIN]\n", argv[0]); return 2; }
    double margin = argc == 6 ? atof(argv[5]) : 0.0;
    int nv_a, nr_a, nv_b, nr_b;
    float *a = load(argv[1], &nv_a, &nr_a), *b = load(argv[2], &nv_b, &nr_b);
    if (!a || !b) { printf("cannot read logits files\n"); return 1; }
    if (nv_a != nv_b || nr_a != nr_b) { printf("shape mismatch %dx%d vs %dx%d\n", nr_a, nv_a, nr_b, nv_b); return 1; }
    double max_kl_allowed = atof(argv[3]), min_top1 = atof(argv[4]);
    double *la = malloc(sizeof(double) * nv_a), *lb = malloc(sizeof(double) * nv_a);
    double sum_kl = 0, max_kl = 0;
    int agree = 0, finite = 1, decisive = 0, agree_decisive = 0, exact = 0, exact_prefix = 0;
    for (int r = 0; r < nr_a; r++) {
        const float *ra = a + (size_t) r * nv_a, *rb = b + (size_t) r * nv_a;
        int same = memcmp(ra, rb, sizeof(float) * (size_t) nv_a) == 0;
        exact += same;
        if (same && exact_prefix == r) exact_prefix++;
        for (int i = 0; i < nv_a; i++) if (!isfinite(rb[i])) finite = 0;
        log_softmax(ra, nv_a, la);
        log_softmax(rb, nv_a, lb);
        double kl = 0;
        int ta = 0, tb = 0;
        for (int i = 0; i < nv_a; i++) {
            kl += exp(la[i]) * (la[i] - lb[i]);
            if (ra[i] > ra[ta]) ta = i;
            if (rb[i] > rb[tb]) tb = i;
        }
        if (getenv("COMPARE_VERBOSE")) printf("row %d kl %.3e top %d/%d\n", r, kl, ta, tb);
        float second = -INFINITY;
        for (int i = 0; i < nv_a; i++) if (i != ta && ra[i] > second) second = ra[i];
        if (ra[ta] - second > margin) { decisive++; agree_decisive += ta == tb; }
        sum_kl += kl;
        if (kl > max_kl) max_kl = kl;
        agree += ta == tb;
    }
    double mean_kl = sum_kl / nr_a, top1 = (double) agree / nr_a;
    double top1_decisive = decisive ? (double) agree_decisive / decisive : 1.0;
    printf("rows %d mean_kl %.3e max_kl %.3e top1 %.4f", nr_a, mean_kl, max_kl, top1);
    if (margin > 0) printf(" top1(margin>%g: %d rows) %.4f", margin, decisive, top1_decisive);
    printf(" bit-identical rows %d (first %d)", exact, exact_prefix);
    /* COMPARE_EXACT_ROWS=N: the first N rows must equal upstream's bit for bit */
    const char *need = getenv("COMPARE_EXACT_ROWS");
    int exact_ok = !need || exact_prefix >= atoi(need);
    if (!exact_ok) printf(" (need the first %s bit-identical)", need);
    printf("%s\n", finite ? "" : " NON-FINITE");
    return (finite && exact_ok && mean_kl <= max_kl_allowed && top1_decisive >= min_top1) ? 0 : 1;
}

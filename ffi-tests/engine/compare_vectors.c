/*
 * Compares two float files written by probe_embd's pool mode (upstream's first): int32 dim,
 * int32 n_rows, rows. Per row: the cosine similarity and the relative L2 error
 * |a - b| / |a|. Prints the worst of each; exits 1 when a shape differs, a value is not
 * finite, a cosine is below MIN_COS or a relative error above MAX_REL.
 *
 * usage: compare_vectors UPSTREAM OURS MIN_COS MAX_REL [ROWS: compare only the first ROWS]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float *load(const char *path, int *dim, int *n_rows) {
    FILE *f = fopen(path, "rb");
    if (!f || fread(dim, 4, 1, f) != 1 || fread(n_rows, 4, 1, f) != 1) return NULL;
    size_t n = (size_t) *dim * *n_rows;
    float *v = malloc(n * sizeof *v + 1);
    if (fread(v, sizeof *v, n, f) != n) return NULL;
    fclose(f);
    return v;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: %s UPSTREAM OURS MIN_COS MAX_REL\n", argv[0]); return 2; }
    int da, ra, db, rb;
    float *a = load(argv[1], &da, &ra), *b = load(argv[2], &db, &rb);
    if (!a || !b) { printf("cannot read vector files\n"); return 1; }
    if (da != db || ra != rb) { printf("shape mismatch %dx%d vs %dx%d\n", ra, da, rb, db); return 1; }
    if (argc == 6 && atoi(argv[5]) < ra) ra = atoi(argv[5]);
    double min_cos = 1, max_rel = 0;
    int finite = 1;
    for (int r = 0; r < ra; r++) {
        double dot = 0, na = 0, nb = 0, nd = 0;
        for (int i = 0; i < da; i++) {
            double x = a[(size_t) r * da + i], y = b[(size_t) r * da + i];
            if (!isfinite(y)) finite = 0;
            dot += x * y; na += x * x; nb += y * y; nd += (x - y) * (x - y);
        }
        double cos = (na == 0 && nb == 0) ? 1 : dot / sqrt(na * nb);
        double rel = na == 0 ? sqrt(nd) : sqrt(nd / na);
        if (cos < min_cos) min_cos = cos;
        if (rel > max_rel) max_rel = rel;
    }
    printf("%d rows of %d: min cosine %.6f, max relative L2 error %.2e", ra, da, min_cos, max_rel);
    int ok = finite && min_cos >= atof(argv[3]) && max_rel <= atof(argv[4]);
    if (!finite) printf(" (non-finite values)");
    printf("\n");
    return ok ? 0 : 1;
}

/*
 * What a durable round costs on this disk by how its files find space, with no engine.
 *
 * Four threads, one file each, write 256 KiB with O_DIRECT and fdatasync it, in step: a round
 * ends when the last file's sync returns, and its time is the round's latency. That is the
 * group-commit preset's round (16 producers of 64 KiB batches on 4 partitions) at its best.
 * The way the files find their space:
 *
 *   grow       the files start empty and grow, as a log's active segments do;
 *   fallocate  the files are fallocate'd to their whole size first (unwritten extents);
 *   overwrite  the files are written and synced to their whole size first, so the rounds
 *              rewrite blocks that exist: space a log could only have by reusing files it
 *              deleted;
 *   ahead      as overwrite, while a fifth thread writes zeros into other files (the next
 *              segments) as fast as the rounds write data, syncing each 64 MiB file when it is
 *              full: space written ahead, the only way a log appending from empty gets it;
 *   apart      as grow, but not in step: each file's thread appends and syncs as fast as it
 *              can, so one file's write often meets another's sync in flight (the engine's
 *              pattern: its shards write while other partitions' syncs run).
 *
 * Usage: rounds WAY ROUNDS DIR. Prints one line: MB/s of data, the rounds' percentiles (µs; for
 * `apart`, each file's append + sync) and the `pwrite`s' own p50 and p99 (µs).
 * benches/fresh-space/run.sh runs every way under perf and counts the device's requests.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FILES 4
#define BLOCK_BYTES (256 * 1024)
#define AHEAD_CHUNK_BYTES (1024 * 1024)
#define AHEAD_FILE_BYTES (64L * 1024 * 1024)

static int fds[FILES];
static char *blocks[FILES];
static int rounds;
static char dir[4096];
static pthread_barrier_t barrier;
static volatile long written_bytes, stop;
static int in_step = 1;
static double *write_us[FILES], *cycle_us[FILES];

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void check(int ok, const char *what) {
    if (!ok) {
        perror(what);
        exit(1);
    }
}

static void *file_rounds(void *arg) {
    long i = (long)arg;
    for (int r = 0; r < rounds; r++) {
        if (in_step)
            pthread_barrier_wait(&barrier);
        double started = now_us();
        check(pwrite(fds[i], blocks[i], BLOCK_BYTES, (long)r * BLOCK_BYTES) == BLOCK_BYTES, "pwrite");
        write_us[i][r] = now_us() - started;
        check(fdatasync(fds[i]) == 0, "fdatasync");
        cycle_us[i][r] = now_us() - started;
        if (in_step)
            pthread_barrier_wait(&barrier);
    }
    return NULL;
}

static void *write_ahead(void *arg) {
    (void)arg;
    char *zeros, path[4200];
    check(posix_memalign((void **)&zeros, 4096, AHEAD_CHUNK_BYTES) == 0, "posix_memalign");
    memset(zeros, 0, AHEAD_CHUNK_BYTES);
    long done = 0, position = 0;
    int fd = -1, files = 0;
    while (!stop) {
        if (done >= written_bytes) {
            usleep(50);
            continue;
        }
        if (fd < 0) {
            snprintf(path, sizeof path, "%s/ahead-%d", dir, files++);
            fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0644);
            check(fd >= 0, "open ahead");
            position = 0;
        }
        check(pwrite(fd, zeros, AHEAD_CHUNK_BYTES, position) == AHEAD_CHUNK_BYTES, "pwrite ahead");
        position += AHEAD_CHUNK_BYTES;
        done += AHEAD_CHUNK_BYTES;
        if (position >= AHEAD_FILE_BYTES) {
            check(fdatasync(fd) == 0, "fdatasync ahead");
            close(fd);
            fd = -1;
        }
    }
    if (fd >= 0)
        close(fd);
    for (int n = 0; n < files; n++) {
        snprintf(path, sizeof path, "%s/ahead-%d", dir, n);
        unlink(path);
    }
    return NULL;
}

static void prepare(int i, const char *way) {
    char path[4200];
    long size = (long)rounds * BLOCK_BYTES;
    write_us[i] = malloc(sizeof(double) * rounds);
    cycle_us[i] = malloc(sizeof(double) * rounds);
    snprintf(path, sizeof path, "%s/file-%d", dir, i);
    fds[i] = open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0644);
    check(fds[i] >= 0, "open");
    check(posix_memalign((void **)&blocks[i], 4096, BLOCK_BYTES) == 0, "posix_memalign");
    if (!strcmp(way, "fallocate"))
        check(fallocate(fds[i], 0, 0, size) == 0, "fallocate");
    if (!strcmp(way, "overwrite") || !strcmp(way, "ahead")) {
        memset(blocks[i], 0, BLOCK_BYTES);
        for (long position = 0; position < size; position += BLOCK_BYTES)
            check(pwrite(fds[i], blocks[i], BLOCK_BYTES, position) == BLOCK_BYTES, "pwrite");
        check(fsync(fds[i]) == 0, "fsync");
    }
    memset(blocks[i], 'a' + i, BLOCK_BYTES);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: rounds grow|fallocate|overwrite|ahead|apart ROUNDS DIR\n");
        return 2;
    }
    const char *way = argv[1];
    rounds = atoi(argv[2]);
    snprintf(dir, sizeof dir, "%s", argv[3]);
    in_step = strcmp(way, "apart") != 0;
    double *latency_us = malloc(sizeof(double) * rounds * FILES);
    double *writes_us = malloc(sizeof(double) * rounds * FILES);
    for (int i = 0; i < FILES; i++)
        prepare(i, way);
    pthread_barrier_init(&barrier, NULL, FILES + 1);
    pthread_t threads[FILES], ahead;
    for (long i = 0; i < FILES; i++)
        pthread_create(&threads[i], NULL, file_rounds, (void *)i);
    int writes_ahead = !strcmp(way, "ahead");
    if (writes_ahead)
        pthread_create(&ahead, NULL, write_ahead, NULL);
    double started = now_us();
    for (int r = 0; in_step && r < rounds; r++) {
        double round_started = now_us();
        pthread_barrier_wait(&barrier);
        pthread_barrier_wait(&barrier);
        latency_us[r] = now_us() - round_started;
        written_bytes += (long)BLOCK_BYTES * FILES;
    }
    for (int i = 0; i < FILES; i++)
        pthread_join(threads[i], NULL);
    double elapsed_us = now_us() - started;
    stop = 1;
    int samples = in_step ? rounds : rounds * FILES;
    for (int i = 0; i < FILES; i++)
        for (int r = 0; r < rounds; r++) {
            writes_us[i * rounds + r] = write_us[i][r];
            if (!in_step)
                latency_us[i * rounds + r] = cycle_us[i][r];
        }
    if (writes_ahead)
        pthread_join(ahead, NULL);
    qsort(latency_us, samples, sizeof(double), by_value);
    qsort(writes_us, rounds * FILES, sizeof(double), by_value);
    printf("%-9s rounds=%d MB/s=%.0f p50=%.0f p99=%.0f p99.9=%.0f max=%.0f write p50=%.0f p99=%.0f\n",
           way, rounds, (double)rounds * BLOCK_BYTES * FILES / elapsed_us, latency_us[samples / 2],
           latency_us[samples * 99 / 100], latency_us[samples * 999 / 1000], latency_us[samples - 1],
           writes_us[rounds * FILES / 2], writes_us[rounds * FILES * 99 / 100]);
    for (int i = 0; i < FILES; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/file-%d", dir, i);
        unlink(path);
    }
    return 0;
}

/* atomic_increments: the lost-update problem, solved with a dlock lock and its fencing token.
 *
 * Many processes add 1 to a shared counter N times each. Without a lock, two of them read the
 * same value and one increment is lost. Here each increment is a read-modify-write done under
 * the lock "atomic-increments", and the counter (a plain file, "VALUE LAST_TOKEN\n") remembers
 * the fencing token of the last write: a writer whose token is not greater than that was
 * overtaken by a newer lock holder (its lease ran out while it was paused, say) and must not
 * write. That check is what fencing tokens are for; real storage does it on the server side.
 *
 *   usage: atomic_increments URL COUNTER_FILE N
 *   e.g.:  echo "0 0" > /tmp/counter
 *          for i in 1 2 3 4; do atomic_increments redis://127.0.0.1:6379 /tmp/counter 250 & done; wait
 *          cat /tmp/counter        # 1000 <token>
 *
 *   build: cc atomic_increments.c $(pkg-config --cflags --libs dlock)
 */
#define _POSIX_C_SOURCE 200809L /* getpid() */

#include <dlock/dlock.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Prints what went wrong in a dlock call and exits. */
static void die(const char *what, dlock_status s) {
  fprintf(stderr, "atomic_increments[%ld]: %s: %s: %s\n", (long)getpid(), what,
          dlock_status_str(s), dlock_last_error());
  exit(1);
}

/* Reads "VALUE LAST_TOKEN" from path; a missing file counts as "0 0". */
static int read_counter(const char *path, uint64_t *value, uint64_t *last_token) {
  FILE *f = fopen(path, "r");
  *value = *last_token = 0;
  if (f == NULL) return 0;
  int ok = fscanf(f, "%" SCNu64 " %" SCNu64, value, last_token) == 2;
  fclose(f);
  return ok ? 0 : -1;
}

/* Writes the counter atomically: readers see the old file or the new one, never half of one. */
static int write_counter(const char *path, uint64_t value, uint64_t token) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (f == NULL) return -1;
  int ok = fprintf(f, "%" PRIu64 " %" PRIu64 "\n", value, token) > 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    remove(tmp);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4 || atoi(argv[3]) < 0) {
    fprintf(stderr, "usage: %s URL COUNTER_FILE N\n", argv[0]);
    return 2;
  }
  const char *url = argv[1], *counter = argv[2];
  int n = atoi(argv[3]);

  dlock_client *client = NULL;
  dlock_status s = dlock_client_open(url, &client);
  if (s != DLOCK_OK) die("dlock_client_open", s);

  /* Wait as long as it takes; the lease (5 s) is renewed in the background while we hold it. */
  dlock_options *opts = dlock_options_new();
  if (opts == NULL) die("dlock_options_new", DLOCK_ENOMEM);
  if ((s = dlock_options_set_wait_ms(opts, -1)) != DLOCK_OK) die("dlock_options_set_wait_ms", s);
  if ((s = dlock_options_set_lease_ms(opts, 5000)) != DLOCK_OK) die("dlock_options_set_lease_ms", s);

  int done = 0, refused = 0;
  uint64_t first_token = 0, last_token_seen = 0, attempts = 0;
  for (int i = 0; i < n; i++) {
    dlock_lock *lock = NULL;
    if ((s = dlock_acquire(client, "atomic-increments", opts, &lock)) != DLOCK_OK) {
      die("dlock_acquire", s);
    }
    uint64_t token = dlock_lock_fencing_token(lock);
    attempts += dlock_lock_attempts(lock);
    if (first_token == 0) first_token = token;
    last_token_seen = token;

    /* The critical section: read, check the fence, write. */
    uint64_t value, stored_token;
    if (read_counter(counter, &value, &stored_token) != 0) {
      fprintf(stderr, "atomic_increments: %s does not hold \"VALUE TOKEN\"\n", counter);
      dlock_release(lock);
      return 1;
    }
    if (token <= stored_token) {
      /* Someone with a newer lock already wrote: our lock is stale, so we must not write. */
      fprintf(stderr, "atomic_increments[%ld]: write refused: fencing token %" PRIu64
              " is not greater than the last writer's %" PRIu64 "\n",
              (long)getpid(), token, stored_token);
      refused++;
    } else if (write_counter(counter, value + 1, token) != 0) {
      perror("atomic_increments: writing the counter");
      dlock_release(lock);
      return 1;
    } else {
      done++;
    }

    /* DLOCK_NOT_HELD here would mean the lease ran out inside the critical section. */
    if ((s = dlock_release(lock)) != DLOCK_OK) die("dlock_release", s);
  }

  printf("pid %ld: %d increments, fencing tokens %" PRIu64 "..%" PRIu64 ", %" PRIu64
         " acquire attempts\n",
         (long)getpid(), done, first_token, last_token_seen, attempts);
  dlock_options_free(opts);
  dlock_client_close(client);
  return refused == 0 ? 0 : 1;
}

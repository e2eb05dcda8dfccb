/* dlock hold, inspect, break, request-release, observe and prepare. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Parses a command's options and words; returns 0, or an exit code (also for --help). */
static int parse_command(const char *command, unsigned allowed, int argc, char **argv,
                         cli_options *o, char ***words, int *nwords) {
  *words = calloc((size_t)argc + 1, sizeof **words);
  if (!*words) return EXIT_OSERR;
  if (parse_options(command, allowed, argc, argv, STOP_NEVER, o, *words, nwords) < 0) {
    return EXIT_USAGE;
  }
  if (o->help) {
    print_help(command, stdout);
    return -1; /* done, exit 0 */
  }
  return finish_options(command, o) == 0 ? 0 : EXIT_USAGE;
}

int cmd_hold(cli_options *o, int argc, char **argv) {
  char **words = NULL;
  int nwords = 0;
  int code = parse_command("hold", CLI_OPT_URL | CLI_OPT_LEASE | CLI_OPT_WAIT | CLI_OPT_KIND |
                                       CLI_OPT_OWNER | CLI_OPT_RULES | CLI_OPT_JSON | CLI_OPT_VERBOSITY,
                           argc, argv, o, &words, &nwords);
  const char *name = words && nwords > 0 ? words[0] : NULL;
  if (code == 0 && nwords != 1) {
    say_error("hold", nwords == 0 ? "no lock NAME (dlock hold [options] NAME)"
                                  : "one lock NAME, got %d words", nwords);
    code = EXIT_USAGE;
  }
  free(words);
  if (code != 0) return code < 0 ? 0 : code;

  dlock_client *client = NULL;
  dlock_queue *q = NULL;
  dlock_lock *lock = NULL;
  if ((code = take_lock(o, "hold", name, &client, &q, &lock)) == 0) {
    const uint64_t token = dlock_lock_fencing_token(lock);
    if (o->json) {
      fputs("{\"name\":", stdout);
      json_string(stdout, name);
      printf(",\"fencing_token\":%" PRIu64 ",\"lease_ms\":%" PRId64 "}\n", token, o->lease_ms);
    } else {
      printf("%" PRIu64 "\n", token);
    }
    fflush(stdout);
    /* Held until a stop signal, or until it is lost (the library reports that at once when
     * the server says so, else at the local deadline). */
    int stop_signal = 0;
    while (!stop_signal && !g_lost_reported && dlock_lock_is_valid(lock)) {
      struct pollfd fds[2] = {{.fd = signals_fd(), .events = POLLIN},
                              {.fd = dlock_queue_fd(q), .events = POLLIN}};
      if (poll(fds, 2, 1000) < 0 && errno != EINTR) break;
      for (int sig; (sig = signals_next()) != 0;) {
        if (is_stop_signal(sig)) stop_signal = sig;
      }
      drain_queue(q);
    }
    char cause[512]; /* the release frees the lock: its loss cause is read first */
    lost_cause_text(lock, cause, sizeof cause);
    const dlock_status s = dlock_release(lock);
    if (g_lost_reported || s == DLOCK_NOT_HELD) {
      say_error("hold", "lock '%s' was lost while held: %s", name,
                cause[0] ? cause : g_lost_reported ? g_lost_reason : release_refusal());
      code = EXIT_LOST;
    } else if (s != DLOCK_OK) {
      say_error("hold", "releasing lock '%s' failed, it stays held until its lease runs out: %s",
                name, dlock_last_error());
      code = exit_code_for(s);
    } else {
      say_verbose(o, "hold", "released lock '%s'", name);
    }
  }
  dlock_client_close(client);
  dlock_queue_free(q);
  return code;
}

static const char *kind_word(const dlock_info *info) {
  if (dlock_info_permits(info) > 0) return "semaphore";
  return dlock_info_kind(info) == DLOCK_SHARED ? "shared" : "exclusive";
}

static void print_remaining(FILE *f, int64_t ms) {
  if (ms < 0) {
    fputs("no expiry", f);
  } else {
    fprintf(f, "%" PRId64 ".%01" PRId64 " s left", ms / 1000, (ms % 1000) / 100);
  }
}

static void print_info_json(const char *name, const dlock_info *info) {
  const uint32_t n = dlock_info_holders(info);
  fputs("{\"name\":", stdout);
  json_string(stdout, name);
  printf(",\"held\":%s,\"kind\":\"%s\",\"permits\":%" PRIu32 ",\"holders\":[", n ? "true" : "false",
         kind_word(info), dlock_info_permits(info));
  for (uint32_t k = 0; k < n; ++k) {
    fputs(k ? ",{\"owner\":" : "{\"owner\":", stdout);
    json_string(stdout, dlock_info_owner(info, k));
    printf(",\"fencing_token\":%" PRIu64 ",\"remaining_ms\":%" PRId64,
           dlock_info_fencing_token(info, k), dlock_info_remaining_ms(info, k));
    if (dlock_info_permits(info) > 0) printf(",\"take\":%" PRIu32, dlock_info_take(info, k));
    size_t len = 0;
    const void *value = dlock_info_value(info, k, &len);
    json_value(stdout, value, len);
    fputc('}', stdout);
  }
  fputc(']', stdout);
  if (n == 0 && dlock_info_closed_ms(info) > 0) {  /* a marker with no holder (dlock break) */
    printf(",\"closed_ms\":%" PRId64 ",\"closed_by\":", dlock_info_closed_ms(info));
    json_string(stdout, dlock_info_closed_by(info));
  }
  fputs("}\n", stdout);
}

/* One line for a free name or a single exclusive holder; a header and a line per holder for
 * shared holds and semaphores. */
static void print_info_text(FILE *f, const char *name, const dlock_info *info) {
  const uint32_t n = dlock_info_holders(info);
  text_string(f, name, false);
  if (n == 0) {
    const int64_t closed = dlock_info_closed_ms(info);
    if (closed > 0) {
      fprintf(f, ": closed with no holder (%s), %" PRId64 ".%01" PRId64 " s left\n",
              dlock_info_closed_by(info), closed / 1000, (closed % 1000) / 100);
    } else {
      fputs(": free\n", f);
    }
    return;
  }
  const uint32_t permits = dlock_info_permits(info);
  const bool one_line = n == 1 && permits == 0 && dlock_info_kind(info) == DLOCK_EXCLUSIVE;
  if (one_line) {
    fputs(": held by ", f);
  } else if (permits > 0) {
    uint32_t taken = 0;  /* a hold may take several (dlock_options_set_take) */
    for (uint32_t k = 0; k < n; ++k) taken += dlock_info_take(info, k);
    fprintf(f, ": semaphore, %" PRIu32 " of %" PRIu32 " permits held\n", taken, permits);
  } else {
    fprintf(f, ": shared by %" PRIu32 "\n", n);
  }
  for (uint32_t k = 0; k < n; ++k) {
    if (!one_line) fputs("  ", f);
    text_string(f, dlock_info_owner(info, k), true);
    /* 0: the backend cannot tell (etcd's layout=mutex keeps a holder's token with the holder). */
    if (dlock_info_fencing_token(info, k) != 0) {
      fprintf(f, ", fencing token %" PRIu64 ", ", dlock_info_fencing_token(info, k));
    } else {
      fputs(", fencing token unknown, ", f);
    }
    if (dlock_info_take(info, k) > 1) fprintf(f, "%" PRIu32 " permits, ", dlock_info_take(info, k));
    print_remaining(f, dlock_info_remaining_ms(info, k));
    size_t len = 0;
    const void *value = dlock_info_value(info, k, &len);
    text_value(f, value, len);
    fputc('\n', f);
  }
}

int cmd_inspect(cli_options *o, int argc, char **argv) {
  char **names = NULL;
  int count = 0;
  int code = parse_command("inspect", CLI_OPT_URL | CLI_OPT_JSON | CLI_OPT_VERBOSITY, argc, argv,
                           o, &names, &count);
  if (code == 0 && count == 0) {
    say_error("inspect", "no lock NAME (dlock inspect [--json] NAME...)");
    code = EXIT_USAGE;
  }
  dlock_client *client = NULL;
  if (code == 0) code = open_client(o, "inspect", &client);
  for (int i = 0; code == 0 && i < count; ++i) {
    dlock_info *info = NULL;
    const dlock_status s = dlock_inspect(client, names[i], &info);
    if (s != DLOCK_OK) {
      say_error("inspect", "%s", dlock_last_error());
      code = exit_code_for(s);
      break;
    }
    if (o->json) {
      print_info_json(names[i], info);
    } else {
      print_info_text(stdout, names[i], info);
    }
    dlock_info_free(info);
  }
  fflush(stdout);
  dlock_client_close(client);
  free(names);
  return code < 0 ? 0 : code;
}

int cmd_prepare(cli_options *o, int argc, char **argv) {
  char **words = NULL;
  int nwords = 0;
  int code = parse_command("prepare", CLI_OPT_URL | CLI_OPT_WAIT | CLI_OPT_VERBOSITY, argc, argv,
                           o, &words, &nwords);
  if (code == 0 && nwords > 0) {
    say_error("prepare", "takes no words, got '%s' (the backend is --url's)", words[0]);
    code = EXIT_USAGE;
  }
  free(words);
  if (code != 0) return code < 0 ? 0 : code;
  /* A minute for a new DynamoDB table to become active, unless --wait says otherwise. */
  const int64_t wait_ms = o->wait_given ? o->wait_ms : 60000;
  const dlock_status s = dlock_backend_prepare(o->url, wait_ms);
  if (s != DLOCK_OK) {
    say_error("prepare", "%s", dlock_last_error());
    return exit_code_for(s);
  }
  /* "ready" means a client can use it now: it connects and authenticates. */
  dlock_client *client = NULL;
  code = open_client(o, "prepare", &client);
  dlock_client_close(client);
  if (code != 0) return code;
  if (o->verbosity != QUIET) printf("ready: %s\n", shown_url(o->url));
  return 0;
}

/* Shows who holds name (on stderr) and asks whether to break it; true for a yes on stdin
 * (any stdin: `echo y | dlock break NAME` answers as a terminal would). */
static bool confirm_break(const cli_options *o, dlock_client *client, const char *name, int *code) {
  dlock_info *info = NULL;
  const dlock_status s = dlock_inspect(client, name, &info);
  if (s != DLOCK_OK) {
    say_error("break", "%s", dlock_last_error());
    *code = exit_code_for(s);
    return false;
  }
  print_info_text(stderr, name, info);
  const bool nothing = dlock_info_holders(info) == 0 && dlock_info_closed_ms(info) == 0;
  dlock_info_free(info);
  if (nothing) {
    say_note(o, "break", "nothing to break");
    *code = 0;
    return false;
  }
  fprintf(stderr, "Break it? Its holders are told at their next renewal%s. [y/N] ",
          o->now ? ", and it is free at once" : "");
  fflush(stderr);
  char answer[16] = "";
  const bool yes = fgets(answer, sizeof answer, stdin) != NULL &&
                   (strcmp(answer, "y\n") == 0 || strcmp(answer, "yes\n") == 0 ||
                    strcmp(answer, "Y\n") == 0 || strcmp(answer, "y") == 0);
  if (!yes) {
    say_error("break", "not confirmed: nothing was broken (--yes breaks without asking)");
    *code = EXIT_NOT_CONFIRMED;
  }
  return yes;
}

static void print_broken(const cli_options *o, const char *name, const dlock_info *info) {
  const uint32_t n = dlock_info_holders(info);
  const int64_t closed = dlock_info_closed_ms(info);
  if (o->json) {
    fputs("{\"name\":", stdout);
    json_string(stdout, name);
    fputs(",\"broken\":[", stdout);
    for (uint32_t k = 0; k < n; ++k) {
      fputs(k ? ",{\"owner\":" : "{\"owner\":", stdout);
      json_string(stdout, dlock_info_owner(info, k));
      printf(",\"fencing_token\":%" PRIu64 ",\"remaining_ms\":%" PRId64 "}",
             dlock_info_fencing_token(info, k), dlock_info_remaining_ms(info, k));
    }
    printf("],\"closed_ms\":%" PRId64 "}\n", closed);
    return;
  }
  if (o->verbosity == QUIET) return;
  if (n == 0) {
    text_string(stdout, name, false);
    fputs(": nobody held it\n", stdout);
  }
  for (uint32_t k = 0; k < n; ++k) {
    fputs("broke ", stdout);
    text_string(stdout, name, false);
    fputs(": ", stdout);
    text_string(stdout, dlock_info_owner(info, k), true);
    printf(", fencing token %" PRIu64 ", ", dlock_info_fencing_token(info, k));
    print_remaining(stdout, dlock_info_remaining_ms(info, k));
    fputc('\n', stdout);
  }
  if (closed > 0) {
    text_string(stdout, name, false);
    printf(": closed for %" PRId64 ".%01" PRId64 " s, until the broken leases would have ended "
           "(--now frees it at once)\n", closed / 1000, (closed % 1000) / 100);
  }
}

int cmd_break(cli_options *o, int argc, char **argv) {
  char **words = NULL;
  int nwords = 0;
  int code = parse_command("break", CLI_OPT_URL | CLI_OPT_JSON | CLI_OPT_VERBOSITY | CLI_OPT_BREAK | CLI_OPT_REASON,
                           argc, argv, o, &words, &nwords);
  const char *name = words && nwords > 0 ? words[0] : NULL;
  if (code == 0 && nwords != 1) {
    say_error("break", nwords == 0 ? "no lock NAME (dlock break [--reason R] [--yes] [--now] NAME)"
                                   : "one lock NAME, got %d words", nwords);
    code = EXIT_USAGE;
  }
  free(words);
  if (code != 0) return code < 0 ? 0 : code;
  dlock_client *client = NULL;
  if ((code = open_client(o, "break", &client)) != 0) return code;
  if (o->yes || confirm_break(o, client, name, &code)) {
    dlock_info *info = NULL;
    const dlock_status s = dlock_break_with(client, name, o->reason, o->now ? DLOCK_BREAK_NOW : 0, &info);
    if (s == DLOCK_OK) {
      print_broken(o, name, info);
      dlock_info_free(info);
    } else {
      say_error("break", "%s", dlock_last_error());
      code = exit_code_for(s);
    }
  }
  fflush(stdout);
  dlock_client_close(client);
  return code;
}

/* dlock request-release NAME: asks the holders of NAME to let go (dlock_request_release). Takes
 * nothing: a holder that listens (dlock exec --on-release-request) decides; one that does not
 * never hears it. Exit 0 when NAME had holders to ask, 1 when nobody holds it. */
int cmd_request_release(cli_options *o, int argc, char **argv) {
  char **words = NULL;
  int nwords = 0;
  int code = parse_command("request-release",
                           CLI_OPT_URL | CLI_OPT_JSON | CLI_OPT_VERBOSITY | CLI_OPT_REASON, argc,
                           argv, o, &words, &nwords);
  const char *name = words && nwords > 0 ? words[0] : NULL;
  if (code == 0 && nwords != 1) {
    say_error("request-release", nwords == 0 ? "no lock NAME (dlock request-release [--reason R] NAME)"
                                             : "one lock NAME, got %d words", nwords);
    code = EXIT_USAGE;
  }
  free(words);
  if (code != 0) return code < 0 ? 0 : code;
  dlock_client *client = NULL;
  if ((code = open_client(o, "request-release", &client)) != 0) return code;
  const dlock_status s = dlock_request_release(client, name, o->reason);
  if (s == DLOCK_OK || s == DLOCK_NOT_HELD) {
    if (o->json) {
      fputs("{\"name\":", stdout);
      json_string(stdout, name);
      printf(",\"asked\":%s}\n", s == DLOCK_OK ? "true" : "false");
    } else if (s == DLOCK_OK && o->verbosity != QUIET) {
      fputs("asked the holder of ", stdout);
      text_string(stdout, name, false);
      fputs(" to let go\n", stdout);
    }
  }
  if (s == DLOCK_NOT_HELD) {
    say_error("request-release", "nobody holds lock '%s': there is no holder to ask", name);
    code = EXIT_NOBODY_HOLDS;
  } else if (s != DLOCK_OK) {
    say_error("request-release", "%s", dlock_last_error());
    code = exit_code_for(s);
  }
  fflush(stdout);
  dlock_client_close(client);
  return code;
}

/* One line per change of leader (dlock observe); runs on the client's thread. */
static void print_leader(const char *name, const dlock_info *leader, void *arg) {
  const cli_options *o = arg;
  size_t len = 0;
  const void *value = leader ? dlock_info_value(leader, 0, &len) : NULL;
  if (o->json) {
    fputs("{\"name\":", stdout);
    json_string(stdout, name);
    if (!leader) {
      fputs(",\"leader\":null}\n", stdout);
    } else {
      fputs(",\"leader\":{\"owner\":", stdout);
      json_string(stdout, dlock_info_owner(leader, 0));
      printf(",\"term\":%" PRIu64 ",\"remaining_ms\":%" PRId64, dlock_info_fencing_token(leader, 0),
             dlock_info_remaining_ms(leader, 0));
      json_value(stdout, value, len);
      fputs("}}\n", stdout);
    }
  } else {
    text_string(stdout, name, false);
    if (!leader) {
      fputs(": nobody leads\n", stdout);
    } else {
      fputs(": led by ", stdout);
      text_string(stdout, dlock_info_owner(leader, 0), true);
      if (dlock_info_fencing_token(leader, 0) != 0) {
        printf(", term %" PRIu64, dlock_info_fencing_token(leader, 0));
      } else {
        fputs(", term unknown", stdout);  /* etcd's layout=mutex */
      }
      text_value(stdout, value, len);
      fputc('\n', stdout);
    }
  }
  fflush(stdout);
}

int cmd_observe(cli_options *o, int argc, char **argv) {
  char **words = NULL;
  int nwords = 0;
  int code = parse_command("observe", CLI_OPT_URL | CLI_OPT_JSON | CLI_OPT_VERBOSITY, argc, argv, o,
                           &words, &nwords);
  const char *name = words && nwords > 0 ? words[0] : NULL;
  if (code == 0 && nwords != 1) {
    say_error("observe", nwords == 0 ? "no NAME (dlock observe [--json] NAME)" : "one NAME, got %d words",
              nwords);
    code = EXIT_USAGE;
  }
  free(words);
  if (code != 0) return code < 0 ? 0 : code;
  if (signals_install() != 0) {
    say_error("observe", "cannot catch signals: %s", strerror(errno));
    return EXIT_OSERR;
  }
  dlock_client *client = NULL;
  if ((code = open_client(o, "observe", &client)) != 0) return code;
  dlock_observer *ob = NULL;
  dlock_status s = dlock_observe(client, name, print_leader, o, &ob);
  if (s != DLOCK_OK) {
    say_error("observe", "%s", dlock_last_error());
    dlock_client_close(client);
    return exit_code_for(s);
  }
  /* Until a stop signal. */
  for (int stop = 0; !stop;) {
    struct pollfd fd = {.fd = signals_fd(), .events = POLLIN};
    if (poll(&fd, 1, -1) < 0 && errno != EINTR) break;
    for (int sig; (sig = signals_next()) != 0;) stop |= is_stop_signal(sig);
  }
  dlock_observer_cancel(ob);
  dlock_client_close(client);
  return 0;
}

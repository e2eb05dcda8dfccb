/* dlock: flock(1) for a fleet. `dlock [--url URL] COMMAND ...`; see print_help and dlock.1. */
#include <string.h>
#include <sys/prctl.h>

#include "cli.h"

static const char kUsage[] =
    "usage: dlock [--url URL] COMMAND [options] ...\n"
    "\n"
    "Commands:\n"
    "  exec [options] NAME [NAME...] -- CMD [ARG...]\n"
    "                                       run CMD while holding lock NAME (several\n"
    "                                       names: all of them, or none)\n"
    "  elect [options] NAME -- CMD [ARG...] wait to lead NAME, then run CMD while leading\n"
    "  hold [options] NAME                  take lock NAME, print its fencing token, hold it\n"
    "                                       until SIGINT or SIGTERM\n"
    "  inspect [--json] NAME...             who holds each lock\n"
    "  observe [--json] NAME                who leads NAME, and each change, until a signal\n"
    "  break [--reason R] [--yes] [--now] NAME  an operator's takeover: delete every hold\n"
    "                                       of NAME; its holders are told, with the reason\n"
    "  request-release [--reason R] NAME    ask the holders of NAME to let go (they decide)\n"
    "  prepare                              create what the backend needs (the DynamoDB table)\n"
    "\n"
    "Options of every command:\n"
    "  --url URL       the backend; default $DLOCK_URL, else redis://127.0.0.1:6379\n"
    "  --url-file PATH the backend's URL read from a file (also $DLOCK_URL_FILE)\n"
    "  -q, --quiet     errors only          -v, --verbose   say what happens\n"
    "  -h, --help      this help; dlock COMMAND --help for a command's own\n"
    "  --version       print the version\n"
    "\n"
    "Exit codes: CMD's own status (128+N when it died of signal N); 64 usage error;\n"
    "69 backend unreachable or failing; 70 the lock was lost while held; 71 a local\n"
    "system error; 75 not acquired within --wait; 126/127 CMD not executable/not found.\n";

#define LEASE_OPTION \
  "  --lease D       lease, renewed in the background while held (default 10s; 0 = none)\n"
#define LABEL_OPTIONS                                                                        \
  "  --owner LABEL   a label `dlock inspect` shows (default HOST:PID)\n"                   \
  "  --value V       a value stored with the hold, which `dlock inspect` shows (at most 4096\n" \
  "                  bytes; a leader's address, a job's progress)\n"
#define RULE_OPTIONS                                                                         \
  "  --min-hold D    the name stays taken at least D after the acquire, however the hold\n"   \
  "                  ends: a job run every minute on ten machines runs once a minute\n"       \
  "  --lock-delay D  after an unclean end (the lease ran out), nobody takes the name for D\n"  \
  "                  more; a release has no delay (at most 60s)\n"
static const char kLockOptions[] =
    LEASE_OPTION
    "  --wait D        how long to wait for the lock (default -1 = no limit; 0 = one try)\n"
    "  --shared        a shared (read) hold: any number at once, no exclusive one meanwhile\n"
    "  --permits N     one of N permits of a counting semaphore\n"
    "  --take K        with --permits: take K of the N permits at once, all or none\n"
    "                  (default 1)\n"
    LABEL_OPTIONS RULE_OPTIONS;
static const char kLeaderOptions[] = LEASE_OPTION LABEL_OPTIONS;
static const char kExecOptions[] =
"  --on-lost A     if the lock is lost while CMD runs: term (SIGTERM, then SIGKILL\n"
          "                  after the kill grace; default), kill (SIGKILL) or ignore; dlock\n"
          "                  then exits 70\n"
          "  --kill-grace D  SIGTERM to SIGKILL; when renewals keep failing, SIGTERM goes out\n"
          "                  this long before the lease could run out (default lease/4)\n"
          "  --max-hold D    a job timeout across machines: once the lock was held D, CMD is\n"
          "                  stopped as for a loss and renewals stop; dlock exits 70\n"
          "  --stopped-grace D  without a terminal: how long a stopped CMD keeps the lock;\n"
          "                  then it is killed, the lock released, dlock exits 70 (default 10s)\n"
          "  --status-file PATH  write dlock's outcome there, one line: acquired TOKEN while\n"
          "                  CMD runs, then cmd-exited N, cmd-signalled N, lost, max-hold, stopped,\n"
          "                  not-acquired, not-found, not-executable, interrupted N,\n"
          "                  backend-error, os-error or usage\n"
          "  --metrics-textfile PATH  when dlock ends, write the run's metrics there (node_exporter's\n"
          "                  textfile format, atomically): outcome (the --status-file word),\n"
          "                  success, exit code, wait and hold seconds, fencing token, end time\n"
          "  --on-release-request SIG  when someone asks the holder to let go (dlock\n"
          "                  request-release), send SIG (TERM, HUP, USR1, ... or a number) to\n"
          "                  CMD's group; CMD decides, and the lock is released when it exits\n";

static const char kCommonOptions[] =
    "  --url URL       the backend; default $DLOCK_URL, else redis://127.0.0.1:6379\n"
    "  --url-file PATH the backend's URL read from a file (also $DLOCK_URL_FILE)\n"
    "  -q, --quiet     errors only          -v, --verbose   say what happens\n"
    "Durations take ms, s or m (a bare number is milliseconds): 500, 30s, 1.5s, 2m.\n";

void print_help(const char *command, FILE *f) {
  if (!command) {
    fputs(kUsage, f);
  } else if (strcmp(command, "exec") == 0) {
    fputs("usage: dlock exec [options] NAME [NAME...] -- CMD [ARG...]\n"
          "Runs CMD (no shell, in its own process group) while holding lock NAME; releases it\n"
          "when CMD exits and exits with CMD's status. CMD's environment has DLOCK_NAME,\n"
          "DLOCK_FENCING_TOKEN and DLOCK_LEASE_MS (not DLOCK_URL). TERM, INT, HUP, QUIT, USR1,\n"
          "USR2 and TSTP sent to dlock reach CMD's group; if dlock dies, that group is killed.\n"
          "On a terminal, CMD's group is the foreground job and dlock stops when CMD stops.\n"
          "Several names: all or none, taken in one fixed order (exec a b and exec b a never\n"
          "deadlock), --wait bounding the whole acquire and the options applying to each; the\n"
          "loss of any one stops CMD. DLOCK_NAME and DLOCK_FENCING_TOKEN are the first name's;\n"
          "DLOCK_NAMES and DLOCK_FENCING_TOKENS list every name and token, one per line.\n\n",
          f);
    fputs(kLockOptions, f);
    fputs(kExecOptions, f);
    fputs(kCommonOptions, f);
  } else if (strcmp(command, "elect") == 0) {
    fputs("usage: dlock elect [options] NAME -- CMD [ARG...]\n"
          "Campaigns for the leadership of NAME: waits (without limit) until this candidate\n"
          "leads, then runs CMD while it leads, exactly as exec runs it under a lock. The\n"
          "term is DLOCK_FENCING_TOKEN: greater than every earlier term of NAME. Losing the\n"
          "leadership stops CMD as --on-lost says; dlock exits with CMD's status, and\n"
          "resigns (the next candidate leads). --value stores the leader's value (its\n"
          "address), which dlock inspect shows. Takes exec's options but --wait, --shared,\n"
          "--permits and --take.\n\n",
          f);
    fputs(kLeaderOptions, f);
    fputs(kExecOptions, f);
    fputs(kCommonOptions, f);
  } else if (strcmp(command, "hold") == 0) {
    fputs("usage: dlock hold [options] NAME\n"
          "Takes lock NAME, prints its fencing token (--json: an object), and holds it,\n"
          "renewed, until SIGINT, SIGTERM or SIGHUP; then releases it and exits 0 (70 if the\n"
          "lock was lost meanwhile).\n\n",
          f);
    fputs(kLockOptions, f);
    fputs("  --json          print {\"name\", \"fencing_token\", \"lease_ms\"}\n", f);
    fputs(kCommonOptions, f);
  } else if (strcmp(command, "inspect") == 0) {
    fputs("usage: dlock inspect [--json] NAME...\n"
          "Shows who holds each lock: owner label, fencing token, lease left, and the value\n"
          "stored with the hold. A snapshot: never decide from it whether to take a lock.\n\n"
          "  --json          one JSON object per NAME per line: name, held, kind (exclusive,\n"
          "                  shared, semaphore), permits, holders [{owner, fencing_token,\n"
          "                  remaining_ms (-1 = no expiry), value (text) or value_base64\n"
          "                  (binary), absent when none}]\n",
          f);
    fputs(kCommonOptions, f);
  } else if (strcmp(command, "observe") == 0) {
    fputs("usage: dlock observe [--json] NAME\n"
          "Prints who leads NAME (dlock elect), then one line per change of leader or of its\n"
          "value, until SIGINT, SIGTERM or SIGHUP. A release is seen at once where the backend\n"
          "notifies; other changes within half a second.\n\n"
          "  --json          one JSON object per change: name, leader (null when nobody\n"
          "                  leads, else owner, term, remaining_ms, value or value_base64)\n",
          f);
    fputs(kCommonOptions, f);
  } else if (strcmp(command, "break") == 0) {
    fputs("usage: dlock break [--reason R] [--yes] [--now] [--json] NAME\n"
          "An operator's takeover of a stuck lock: shows who holds NAME, asks for confirmation,\n"
          "then deletes every hold of NAME (never its fencing counter: the next token is\n"
          "greater). Each broken holder is told at its next renewal (the cause 'broken' and the\n"
          "reason); dlock exec there stops its CMD and exits 70. Until the broken holders'\n"
          "leases would have ended, nobody can take NAME, so a holder that has not heard yet\n"
          "never overlaps a new one. Prints the broken holders' owner labels and fencing tokens.\n\n"
          "  --reason R      told to the broken holders (at most 1024 bytes)\n"
          "  -y, --yes       no confirmation (needed when stdin is not a terminal)\n"
          "  --now           free NAME at once (for a resource that checks fencing tokens)\n"
          "  --json          print {name, broken: [{owner, fencing_token, remaining_ms}],\n"
          "                  closed_ms}\n",
          f);
    fputs(kCommonOptions, f);
  } else if (strcmp(command, "request-release") == 0) {
    fputs("usage: dlock request-release [--reason R] [--json] NAME\n"
          "Asks the holders of NAME to let go, with the reason: a cooperative takeover, short\n"
          "of a break. Nothing is taken: a holder that listens (dlock exec\n"
          "--on-release-request SIG passes SIG on to its CMD) decides whether to release; one\n"
          "that does not never hears it. A holder hears it within a round trip (Redis, etcd)\n"
          "or at its next renewal (DynamoDB); a request made before the holder listens (its\n"
          "first round trip after the acquire) is not heard: ask again. Exits 0 when NAME had\n"
          "holders to ask, 1 when nobody holds it.\n\n"
          "  --reason R      told to the holders (at most 1024 bytes)\n"
          "  --json          print {name, asked (true, or false when nobody holds NAME)}\n",
          f);
    fputs(kCommonOptions, f);
  } else if (strcmp(command, "prepare") == 0) {
    fputs("usage: dlock prepare [--wait D]\n"
          "Creates what the backend at --url needs before locks can be taken there (for\n"
          "dynamodb://, the table) and waits up to --wait (default 1m) until it is ready.\n"
          "Nothing to do for Redis and etcd (the URL is checked).\n\n"
          "  --wait D        how long to wait for it to be ready (-1 = no limit)\n",
          f);
    fputs(kCommonOptions, f);
  }
}

/* The command at argv[first], with the options before it in o. */
static int run_command(cli_options *o, int first, int argc, char **argv) {
  if (o->version) {
    printf("dlock %s\n", dlock_version());
    return 0;
  }
  if (o->help) {
    print_help(NULL, stdout);
    return 0;
  }
  if (first >= argc) {
    fputs(kUsage, stderr);
    return EXIT_USAGE;
  }
  const char *command = argv[first];
  int (*run)(cli_options *, int, char **) = NULL;
  if (strcmp(command, "exec") == 0) run = cmd_exec;
  else if (strcmp(command, "elect") == 0) run = cmd_elect;
  else if (strcmp(command, "observe") == 0) run = cmd_observe;
  else if (strcmp(command, "hold") == 0) run = cmd_hold;
  else if (strcmp(command, "inspect") == 0) run = cmd_inspect;
  else if (strcmp(command, "prepare") == 0) run = cmd_prepare;
  else if (strcmp(command, "break") == 0) run = cmd_break;
  else if (strcmp(command, "request-release") == 0) run = cmd_request_release;
  else if (strcmp(command, "help") == 0) {
    print_help(first + 1 < argc ? argv[first + 1] : NULL, stdout);
    return 0;
  }
  if (!run) {
    say_error(NULL, "unknown command '%s' (exec, elect, hold, inspect, observe, break, request-release, "
              "prepare; dlock --help)", command);
    return EXIT_USAGE;
  }
  return run(o, argc - first - 1, argv + first + 1);
}

int main(int argc, char **argv) {
  /* No core dump, and no ptrace or /proc/PID/environ for other processes of this user: the
   * URL and its password are in this process's memory. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  note_inherited_fds();
  cli_options o;
  default_options(&o);
  char **words = argv; /* unused before the command: STOP_AT_WORD collects none */
  int nwords = 0;
  const int at = parse_options(NULL, CLI_OPT_URL | CLI_OPT_VERBOSITY | CLI_OPT_JSON, argc - 1,
                               argv + 1, STOP_AT_WORD, &o, words, &nwords);
  const int code = at < 0 ? EXIT_USAGE : run_command(&o, at + 1, argc, argv);
  free_options(&o);
  return code;
}

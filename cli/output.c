/* Messages (one line each, on stderr), JSON and quoting for names and owner labels, which may
 * hold any byte but NUL. A URL is shown only through dlock_url_redact: never its password. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const char *g_program = "dlock";

static void put_line(char *line, size_t len);

/* One write for the whole line: a message of CMD's (a shell reporting a signal) or of the
 * library's thread never lands inside it (CI saw "dlock exec: " cut by a shell's "User defined
 * signal 1"). */
static void say(const char *command, const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  char *message = NULL;
  char *line = NULL;
  int n = -1;
  if (vasprintf(&message, fmt, ap) >= 0) {
    n = command ? asprintf(&line, "%s %s: %s\n", g_program, command, message)
                : asprintf(&line, "%s: %s\n", g_program, message);
    free(message);
  }
  if (n >= 0) {
    put_line(line, (size_t)n);
  } else {  /* out of memory: piece by piece rather than not at all */
    fprintf(stderr, command ? "%s %s: " : "%s: ", g_program, command);
    vfprintf(stderr, fmt, again);
    fputc('\n', stderr);
  }
  va_end(again);
}

void say_error(const char *command, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(command, fmt, ap);
  va_end(ap);
}

void say_note(const cli_options *o, const char *command, const char *fmt, ...) {
  if (o->verbosity == QUIET) return;
  va_list ap;
  va_start(ap, fmt);
  say(command, fmt, ap);
  va_end(ap);
}

/* Wall-clock milliseconds, for a log line's time (nothing is decided by it). */
static long long unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* line (built in memory) on stderr with one write: lines from the library's thread and from
 * this one never mix. */
static void put_line(char *line, size_t len) {
  if (line == NULL) return;
  fwrite(line, 1, len, stderr);
  fflush(stderr);
  free(line);
}

void say_verbose(const cli_options *o, const char *command, const char *fmt, ...) {
  if (o->verbosity != VERBOSE) return;
  va_list ap;
  va_start(ap, fmt);
  if (!o->json) {
    say(command, fmt, ap);
    va_end(ap);
    return;
  }
  /* -v --json: {"event": "note", "command", "message", "unix_ms"}, a line like the events'. */
  char *message = NULL;
  if (vasprintf(&message, fmt, ap) < 0) message = NULL;
  va_end(ap);
  char *line = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&line, &len);
  if (f == NULL) {
    free(message);
    return;
  }
  fputs("{\"event\":\"note\",\"command\":", f);
  json_string(f, command ? command : "");
  fputs(",\"message\":", f);
  json_string(f, message ? message : "");
  fprintf(f, ",\"unix_ms\":%lld}\n", unix_ms());
  fclose(f);
  free(message);
  put_line(line, len);
}

void print_event_json(const dlock_event *e, void *arg) {
  (void)arg;
  char *line = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&line, &len);
  if (f == NULL) return;
  fputs("{\"event\":", f);
  json_string(f, dlock_event_type_name(dlock_event_type_of(e)));
  fputs(",\"name\":", f);
  json_string(f, dlock_event_lock_name(e));
  fprintf(f, ",\"attempts\":%u,\"elapsed_ms\":%lld,\"fencing_token\":%llu,\"status\":",
          dlock_event_attempts(e), (long long)dlock_event_elapsed_ms(e),
          (unsigned long long)dlock_event_fencing_token(e));
  json_string(f, dlock_status_str(dlock_event_status(e)));
  fputs(",\"detail\":", f);
  json_string(f, dlock_event_detail(e));
  fprintf(f, ",\"unix_ms\":%lld}\n", unix_ms());
  fclose(f);
  put_line(line, len);
}

const char *shown_url(const char *url) {
  /* tls_verify=0 (false on dynamodb://) checks no certificate: wherever the URL is shown, say
   * so. The parameter is looked for as the library reads it: a whole query item. */
  static const char note[] = " (certificate not verified: tls_verify=0)";
  static char buf[512];
  if (dlock_url_redact(url, buf, sizeof buf - (sizeof note - 1)) == 0) buf[0] = '\0';
  const char *query = url ? strchr(url, '?') : NULL;
  for (const char *item = query; item != NULL; item = strchr(item + 1, '&')) {
    const size_t len = strcspn(item + 1, "&");
    if ((len == 12 && strncmp(item + 1, "tls_verify=0", 12) == 0) ||
        (len == 16 && strncmp(item + 1, "tls_verify=false", 16) == 0)) {
      strcat(buf, note);
      break;
    }
  }
  return buf;
}

/* The length of the valid UTF-8 sequence at s (1..4), or 0 when it is not one. */
static size_t utf8_length(const unsigned char *s) {
  if (s[0] < 0x80) return 1;
  size_t n;
  unsigned min;
  unsigned cp;
  if ((s[0] & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = s[0] & 0x1F;
  } else if ((s[0] & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = s[0] & 0x0F;
  } else if ((s[0] & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = s[0] & 0x07;
  } else {
    return 0;
  }
  for (size_t i = 1; i < n; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void json_string(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  fputc('"', f);
  while (*p) {
    if (*p == '"' || *p == '\\') {
      fputc('\\', f);
      fputc(*p++, f);
    } else if (*p < 0x20 || *p == 0x7F) {
      fprintf(f, "\\u%04x", *p++);
    } else {
      size_t n = utf8_length(p);
      if (n == 0) {
        fputs("\\ufffd", f);
        ++p;
      } else {
        fwrite(p, 1, n, f);
        p += n;
      }
    }
  }
  fputc('"', f);
}

static bool needs_quotes(const unsigned char *p) {
  if (!*p) return true;
  for (size_t n; *p; p += n) {
    n = *p < 0x20 || *p == 0x7F || *p == '\'' || *p == '\\' ? 0 : utf8_length(p);
    if (n == 0) return true;
  }
  return false;
}

void text_string(FILE *f, const char *s, bool quote_always) {
  const unsigned char *p = (const unsigned char *)s;
  if (!quote_always && !needs_quotes(p)) {
    fputs(s, f);
    return;
  }
  fputc('\'', f);
  while (*p) {
    size_t n = *p < 0x20 || *p == 0x7F || *p == '\'' || *p == '\\' ? 0 : utf8_length(p);
    if (n == 0) {
      fprintf(f, "\\x%02x", *p++);
    } else {
      fwrite(p, 1, n, f);
      p += n;
    }
  }
  fputc('\'', f);
}

char *text_string_dup(const char *s, bool quote_always) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) return NULL;
  text_string(f, s, quote_always);
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

/* Text: valid UTF-8 with no NUL. */
static bool is_text(const unsigned char *p, size_t len) {
  for (size_t i = 0; i < len;) {
    /* utf8_length reads up to 4 bytes: copy a tail shorter than that, NUL-padded. */
    unsigned char tail[4] = {0, 0, 0, 0};
    const unsigned char *at = p + i;
    if (len - i < 4) {
      memcpy(tail, at, len - i);
      at = tail;
    }
    size_t n = at[0] == 0 ? 0 : utf8_length(at);
    if (n == 0 || n > len - i) return false;
    i += n;
  }
  return true;
}

void json_value(FILE *f, const void *data, size_t len) {
  const unsigned char *p = data;
  if (len == 0) return;
  if (is_text(p, len)) {
    fputs(",\"value\":", f);
    json_string(f, (const char *)p); /* dlock_info_value ends it with a NUL */
    return;
  }
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  fputs(",\"value_base64\":\"", f);
  for (size_t i = 0; i < len; i += 3) {
    unsigned v = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0) |
                 (i + 2 < len ? p[i + 2] : 0);
    fputc(kAlphabet[v >> 18 & 63], f);
    fputc(kAlphabet[v >> 12 & 63], f);
    fputc(i + 1 < len ? kAlphabet[v >> 6 & 63] : '=', f);
    fputc(i + 2 < len ? kAlphabet[v & 63] : '=', f);
  }
  fputc('"', f);
}

void text_value(FILE *f, const void *data, size_t len) {
  if (len == 0) return;
  if (is_text(data, len)) {
    fputs(", value ", f);
    text_string(f, data, true);
  } else {
    fprintf(f, ", value of %zu bytes (binary: --json shows it in base64)", len);
  }
}

int exit_code_for(dlock_status s) {
  switch (s) {
    case DLOCK_EINVAL: return EXIT_USAGE;
    case DLOCK_NOT_ACQUIRED: return EXIT_NOT_ACQUIRED;
    case DLOCK_NOT_HELD: return EXIT_LOST;
    case DLOCK_ENOMEM:
    case DLOCK_EINTERNAL: return EXIT_OSERR;
    default: return EXIT_BACKEND; /* EIO, EBACKEND, EAUTH and anything newer */
  }
}

// systemd's journal as the destination of the process's output. Under a
// unit, stdout and stderr are a stream the journal reads, named by
// JOURNAL_STREAM; a line there may start with its syslog priority (`<3>` for
// an error, sd-daemon(3)), which the journal takes off and keeps as the
// line's priority, so that `journalctl -p warning` selects by it.
#pragma once

#include <string_view>

namespace lmwarden::app {

// Sets the log's form: without a time of its own and with each line's
// priority when stdout goes to the journal; else stamped, in local time with
// its offset from UTC.
void set_log_format();

// Writes `text` to stderr as `lmwarden: TEXT`, each of its lines as an error
// when stderr goes to the journal: what stops a command.
void say_error(std::string_view text);

// Writes `text` (one line) to stdout at the journal's info priority when
// stdout goes to it: a line the log level does not govern.
void say_info(std::string_view text);

}  // namespace lmwarden::app

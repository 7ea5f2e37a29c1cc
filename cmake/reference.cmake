# Writes the --help reference of every command (cmake -P): OUT_TXT (plain text) and OUT_MAN (a
# man page, section 1, holding the same text). Run by the `tollgate_reference` target with
# TOLLGATE = the built binary.
set(commands "--help" "serve --help" "stdio --help" "config --help" "keys --help"
             "accounts --help" "corpus generate --help")
set(text "")
foreach(c IN LISTS commands)
  separate_arguments(args UNIX_COMMAND "${c}")
  execute_process(COMMAND ${TOLLGATE} ${args} OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tollgate ${c} exited ${rc}: ${err}")
  endif()
  string(APPEND text "$ tollgate ${c}\n${out}${err}\n")
endforeach()
file(WRITE ${OUT_TXT} "${text}")
# roff: a leading '.' or '\'' would be a request, a backslash an escape.
string(REPLACE "\\" "\\e" man "${text}")
string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" man "${man}")
file(WRITE ${OUT_MAN} ".TH TOLLGATE 1 \"\" \"tollgate ${VERSION}\" \"User Commands\"
.SH NAME
tollgate \\- MCP server and REST API for story search behind API keys, rate limits and quotas
.SH DESCRIPTION
Every command and flag, as its --help prints it. The configuration file is described in
/usr/share/doc/tollgate/README.md; the systemd unit is tollgate.service.
.PP
.nf
${man}.fi
")

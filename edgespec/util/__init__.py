"""The bottom layer: helpers every other layer may use and that import nothing else of edgespec's.

errors.py        user-facing errors: one line on stderr and a non-zero exit
interrupts.py    Ctrl-C, SIGTERM and SIGHUP in a process that lives inside C
stdout.py        stdout that fails: one rule for every command
paths.py         the home folder every command reads
user_files.py    every file a user names or keeps, read bounded and in chunks
system_paths.py  /proc, /sys and /dev: never read as a user's context
home_files.py    every file under the home, opened trusting none: regular files, bounded, checked
output_files.py  files a command writes after its work is done
atomic_file.py   replacing a file atomically
unsaved.py       what is kept only to be faster next time, done without where unwritable
keyed_files.py   files of measurements by key, entries of another version dropped
json_depth.py    JSON from outside read with its nesting bounded
text_check.py    checks on a user's text before any model loads
hardware.py      this machine's cores, RAM and how busy it is
provenance.py    where a measurement came from: command, code, machine
"""

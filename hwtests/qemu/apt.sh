# hwtests/qemu/apt.sh - the two questions the test bed's scripts ask Debian's package tools,
# sourced by hwtests/qemu/run and hwtests/qemu/kernel/build (not run).

# Whether package $1 is installed.
pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep 'install ok installed' >/dev/null
}

# Whether apt offers version $2 of package $1.
apt_has_version() {
    apt-cache madison "$1" 2>/dev/null | awk -F'|' '{ gsub(/ /, "", $2); print $2 }' | grep -Fx "$2" >/dev/null
}

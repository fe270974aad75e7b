/* A container's terminal for its engine (console.h). Runs in cordon-runtime on the host as root; the
 * console socket is the engine's (conmon's, the shim's), trusted. The terminal is a pseudo-terminal
 * of the host's devpts: the engine holds its master, the container's process only its slave (an open
 * file, which names nothing the container can open again: the host's /dev/pts is not in its view). */
#include "runtime/console.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include "shared/fd-util.h"

/* runc's protocol: one message whose data is the terminal's name and whose SCM_RIGHTS is its master. */
static int send_master(const char *socket_path, int master, const char *name, struct cdn_error *err)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof a.sun_path)
        return cdn_error_field(err, ENAMETOOLONG, "--console-socket", "--console-socket: path too long");
    memcpy(a.sun_path, socket_path, strlen(socket_path) + 1);
    _cleanup_close_ int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *) &a, sizeof a) < 0)
        return cdn_error_field(err, errno, "--console-socket", "--console-socket %s: %m", socket_path);
    if (cdn_send_fd(s, name, strlen(name), master, MSG_NOSIGNAL) < 0)
        return cdn_error_field(err, errno, "--console-socket", "send the terminal to %s: %m", socket_path);
    return 0;
}

int cdn_rt_console(const char *socket_path, struct cdn_error *err)
{
    _cleanup_close_ int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || unlockpt(master) < 0)
        return cdn_error_set(err, errno, "open a pseudo-terminal: %m");
    char name[64];
    if (ptsname_r(master, name, sizeof name) != 0)
        (void) snprintf(name, sizeof name, "/dev/ptmx");
    int slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0)
        return cdn_error_set(err, errno, "open the terminal's slave: %m");
    int r = send_master(socket_path, master, name, err);
    if (r < 0) {
        (void) close(slave);
        return r;
    }
    return slave;
}

/* cordon-worker: the embedded interpreter (docs/process.md).
 *
 * The zygote starts it once, imports the common modules and compiles the call
 * server (worker-server.py); every worker, its template and every executor
 * inherit it by fork. Only executors (worker-template.c) run Python: the
 * server, and in it the calls. This file is the C side the server needs: dict
 * version tags (what a call changed, in a compare per dict), memfds for the
 * captured output, and the fork hooks. */
#include <Python.h>

#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker-call.h"
#include "shared/macro.h"

/* The call server, in Python: compiled once in the zygote. */
static const char server_py[] =
#include "worker-server.py.h"
    ;

/* Dicts to watch and their version tags at the last snapshot: Python 3.11 gives every dict a tag
 * that changes with each mutation, so telling whether a call touched one is an integer compare.
 * Two lists: the dicts the server puts back when they changed (modules', builtins', sys.modules,
 * os.environ's), and classes' dicts, which it cannot put back (a class's attribute cache and
 * slots follow its dict): a change there costs the executor. */
struct watch {
    PyObject *list;   /* holds the dicts' owners alive */
    PyObject **dicts; /* borrowed: each item's dict, in one array (a compare per dict, no indirection) */
    uint64_t *tags;
    Py_ssize_t n;
};
static struct watch dicts, classes;

static uint64_t dict_tag(PyObject *d)
{
#if PY_VERSION_HEX < 0x030c0000
    return ((PyDictObject *) d)->ma_version_tag;
#else
#error "the call server's scrub needs dict version tags (Python 3.11); port it to dict watchers"
#endif
}

/* A list item's dict: the item itself, or a class's own (not the read-only proxy Python shows). */
static PyObject *item_dict(PyObject *o)
{
    if (PyDict_Check(o))
        return o;
    if (PyType_Check(o) && ((PyTypeObject *) o)->tp_dict && PyDict_Check(((PyTypeObject *) o)->tp_dict))
        return ((PyTypeObject *) o)->tp_dict;
    return NULL;
}

static PyObject *take(struct watch *wt, PyObject *list)
{
    if (!PyList_Check(list))
        return PyErr_Format(PyExc_TypeError, "snapshot: a list of dicts or classes");
    Py_ssize_t n = PyList_GET_SIZE(list);
    _cleanup_free_ PyObject **d = malloc((size_t) (n ? n : 1) * sizeof *d);
    _cleanup_free_ uint64_t *t = malloc((size_t) (n ? n : 1) * sizeof *t);
    if (!d || !t)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!(d[i] = item_dict(PyList_GET_ITEM(list, i))))
            return PyErr_Format(PyExc_TypeError, "snapshot: item %zd is neither a dict nor a class", i);
        t[i] = dict_tag(d[i]);
    }
    /* A class's dict is not replaced while the class lives (only its contents change), and the
     * list keeps the classes alive: the borrowed pointers stay valid. */
    Py_INCREF(list);
    Py_XSETREF(wt->list, list);
    free(wt->dicts), free(wt->tags);
    *wt = (struct watch){.list = wt->list, .dicts = TAKE_PTR(d), .tags = TAKE_PTR(t), .n = n};
    Py_RETURN_NONE;
}

static PyObject *native_snapshot(PyObject *self, PyObject *list)
{
    (void) self;
    return take(&dicts, list);
}

static PyObject *native_changed(PyObject *self, PyObject *unused)
{
    (void) self, (void) unused;
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < dicts.n; i++)
        if (dict_tag(dicts.dicts[i]) != dicts.tags[i]) {
            PyObject *k = PyLong_FromSsize_t(i);
            if (!k || PyList_Append(out, k) < 0)
                Py_CLEAR(out);
            Py_XDECREF(k);
        }
    return out;
}

static PyObject *native_watch_classes(PyObject *self, PyObject *list)
{
    (void) self;
    return take(&classes, list);
}

static PyObject *native_classes_changed(PyObject *self, PyObject *unused)
{
    (void) self, (void) unused;
    for (Py_ssize_t i = 0; i < classes.n; i++)
        if (dict_tag(classes.dicts[i]) != classes.tags[i])
            Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyObject *native_memfd(PyObject *self, PyObject *name)
{
    (void) self;
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return NULL;
    int fd = memfd_create(s, 0);
    return fd < 0 ? PyErr_SetFromErrno(PyExc_OSError) : PyLong_FromLong(fd);
}

static PyMethodDef native_methods[] = {
    {"snapshot", native_snapshot, METH_O, "remember the version tags of a list of dicts"},
    {"changed", native_changed, METH_NOARGS, "indices of the dicts changed since the snapshot"},
    {"watch_classes", native_watch_classes, METH_O, "remember the version tags of classes' dicts"},
    {"classes_changed", native_classes_changed, METH_NOARGS, "whether a watched class's dict changed"},
    {"memfd", native_memfd, METH_O, "memfd_create(name)"},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_cordon_native", NULL, -1, native_methods, NULL, NULL, NULL, NULL};
static PyObject *native_init(void)
{
    return PyModule_Create(&native_module);
}

int cdn_worker_python_init(struct cdn_error *err)
{
    if (PyImport_AppendInittab("_cordon_native", native_init) < 0)
        return cdn_error_set(err, ENOMEM, "python: register the native module");
    PyConfig cfg;
    PyConfig_InitIsolatedConfig(&cfg);
    cfg.install_signal_handlers = 0;
    cfg.write_bytecode = 0;
    cfg.site_import = 1;
    /* The libpython's own stdlib, not whatever `python3` comes first in PATH (a pyenv's, say,
     * which Landlock would then refuse to read from). */
    PyStatus st = PyConfig_SetBytesString(&cfg, &cfg.home, CDN_PYTHON_HOME);
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    if (PyStatus_Exception(st))
        return cdn_error_set(err, EIO, "python: start the interpreter: %s", st.err_msg ? st.err_msg : "?");
    PyObject *m = PyImport_AddModule("_cordon_server"); /* borrowed; in sys.modules */
    PyObject *d = m ? PyModule_GetDict(m) : NULL;
    PyObject *r = d ? PyRun_String(server_py, Py_file_input, d, d) : NULL;
    if (!r) {
        PyErr_Print();
        return cdn_error_set(err, EIO, "python: load the call server");
    }
    Py_DECREF(r);
    return 0;
}

void cdn_worker_python_before_fork(void)
{
    PyOS_BeforeFork();
}

void cdn_worker_python_after_fork(void)
{
    PyOS_AfterFork_Child();
}

void cdn_worker_python_after_fork_parent(void)
{
    PyOS_AfterFork_Parent();
}

void cdn_worker_python_serve(int fd, bool fresh)
{
    char cmd[80];
    (void) snprintf(cmd, sizeof cmd, "import _cordon_server; _cordon_server.serve(%d, %s)", fd,
                    fresh ? "True" : "False");
    int r = PyRun_SimpleString(cmd);
    _exit(r == 0 ? 0 : 112);
}

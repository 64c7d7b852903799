// _pyjail_template: the C half of a template (`pyjail serve`), an extension module of the
// rootfs's interpreter, bound read-only into the template (never into a fresh jail). The
// template's Python half (pyjail_template.py) imports the preloads, then calls serve(): from
// there the template runs only this loop. Each request becomes a run by template_::fork_run
// (forked_run.cpp): the per-run isolation is C++ code, never Python.
//
// serve(fd, reaper) returns None when the server closes the socket (the template then exits), and
// (kind, target, args, options, env) in a run's program, whose jail is complete by then.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string.h>  // explicit_bzero

#include <cstring>
#include <string>

#include "arenas.hpp"
#include "forked_run.hpp"
#include "huge_pages.hpp"
#include "numpy_reseed.hpp"
#include "run_request.hpp"
#include "sys.hpp"
#include "template_protocol.hpp"

namespace {

using namespace pyjail;

void reply(int control, TemplateReplyKind kind, pid_t pid, const std::string& text, int fd) {
    TemplateReply r{};
    r.kind = kind;
    r.pid = pid;
    std::snprintf(r.text, sizeof r.text, "%s", text.c_str());
    (void)send_with_fd(control, &r, sizeof r, fd);
}

// What collapse_into_huge_pages did, told to the server with "ready" (its --verbose says it).
std::string g_memory_note;

// Every run's pid 1 is our child: reaped here, so none stays a zombie.
void reap_runs() {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
}

PyObject* str_list(const std::vector<std::string>& v) {
    PyObject* list = PyList_New(static_cast<Py_ssize_t>(v.size()));
    if (list == nullptr) return nullptr;
    for (std::size_t i = 0; i < v.size(); ++i) {
        PyObject* s = PyUnicode_DecodeFSDefaultAndSize(v[i].data(), static_cast<Py_ssize_t>(v[i].size()));
        if (s == nullptr) {
            Py_DECREF(list);
            return nullptr;
        }
        PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), s);
    }
    return list;
}

// In the run's program: its jail is complete (fork_run), the template's descriptors are
// closed. serve() hands the interpreter its command, parsed by the client (command.hpp):
// (kind, target, args, options, env): kind "file", "c", "m" or "stdin"; options a list of
// (letter, value), each one a run from a template honours (template_option_refusal).
PyObject* run_of(const RunRequest& request) {
    static const char* const kKinds[] = {"file", "c", "m", "stdin"};
    const PythonCommand& c = request.command;
    PyObject* options = PyList_New(static_cast<Py_ssize_t>(c.options.size()));
    if (options == nullptr) return nullptr;
    for (std::size_t i = 0; i < c.options.size(); ++i) {
        const PythonOption& o = c.options[i];
        PyObject* item = Py_BuildValue("(s#N)", &o.letter, Py_ssize_t{1},
                                       PyUnicode_DecodeFSDefaultAndSize(o.value.data(),
                                                                        static_cast<Py_ssize_t>(o.value.size())));
        if (item == nullptr) {
            Py_DECREF(options);
            return nullptr;
        }
        PyList_SET_ITEM(options, static_cast<Py_ssize_t>(i), item);
    }
    PyObject* args = str_list(c.args);
    PyObject* env = args != nullptr ? str_list(request.env) : nullptr;
    PyObject* target = PyUnicode_DecodeFSDefaultAndSize(c.target.data(), static_cast<Py_ssize_t>(c.target.size()));
    if (env == nullptr || target == nullptr) {
        Py_DECREF(options);
        Py_XDECREF(args);
        Py_XDECREF(env);
        Py_XDECREF(target);
        return nullptr;
    }
    return Py_BuildValue("(sNNNN)", kKinds[static_cast<std::size_t>(c.kind)], target, args, options, env);
}

// The buffer requests are received in: a mapping of its own, which no run has
// (MADV_DONTFORK: a run's program, forked from the template's memory, gets no copy of it).
// The template writes each request there while the last run's program may still share the
// rest of its memory: writing here copies none of that program's pages, nor splits a huge
// page of the template's (huge_pages.hpp). Mapped once, for the template's life: serve()
// returns into a run's program, which must not unmap what it does not have.
char* receive_buffer(std::size_t size) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    if (::madvise(p, size, MADV_DONTFORK) != 0) {
        ::munmap(p, size);
        return nullptr;
    }
    return static_cast<char*>(p);
}

// The template: every later run is a fork of this process, and can read its memory (its
// own copy). A request's decoded bytes (the run's command line and environment) are cleared,
// not merely freed, before the next request is read and so before the next fork: a later
// run scanning its memory finds nothing of an earlier run's request. Not right after the
// fork: the template's writes then copy the pages its run's program still shares (and
// split huge pages); by the next request that program has most often ended.
void forget_request(RunRequest& request) {
    wipe_request(request);
    request = RunRequest{};
}

// In the template, once it forked a run (pid > 0) or could not (pid < 0, `error` says why):
// the request's bytes cleared from the receive buffer (no run has it; cleared all the same),
// and the server told the run's pid with a pidfd, or the refusal.
void answer_request(int ctl, pid_t pid, const std::string& error, char* buf, std::size_t n, const int* fds,
                    int got) {
    ::explicit_bzero(buf, n);
    for (int k = 0; k < got; ++k) ::close(fds[k]);
    if (pid < 0) {
        reply(ctl, TemplateReplyKind::Refused, 0, error, -1);
        return;
    }
    // The server supervises the run through this: it is never the run's parent.
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) {
        ::kill(pid, SIGKILL);
        reply(ctl, TemplateReplyKind::Refused, 0, std::string("pidfd_open: ") + std::strerror(errno), -1);
        return;
    }
    reply(ctl, TemplateReplyKind::Started, pid, "", pidfd);
    ::close(pidfd);
}

PyObject* serve(PyObject*, PyObject* args) {
    int ctl = -1;
    const char* reaper = nullptr;
    if (!PyArg_ParseTuple(args, "is", &ctl, &reaper)) return nullptr;
    int reaper_fd = ::open(reaper, O_PATH | O_CLOEXEC);
    if (reaper_fd < 0) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, reaper);
    template_::set_reaper(reaper_fd);
    template_::save_program_signals();
    int pidns = ::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    if (pidns < 0) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, "/proc/self/ns/pid");
    int netns = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (netns < 0) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, "/proc/self/ns/net");
    template_::make_spare_network(netns);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &chld, nullptr);
    int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0) return PyErr_SetFromErrno(PyExc_OSError);
    const template_::ForkHooks hooks{PyOS_BeforeFork, PyOS_AfterFork_Parent, PyOS_AfterFork_Child};

    constexpr std::size_t kBufferBytes = kMaxRequestBytes + 1;
    char* buf = receive_buffer(kBufferBytes);
    if (buf == nullptr) return PyErr_SetFromErrno(PyExc_OSError);

    reply(ctl, TemplateReplyKind::Ready, 0, g_memory_note, -1);
    RunRequest request;  // the last run's until the next request (forget_request)
    while (true) {
        pollfd p[2] = {{ctl, POLLIN, 0}, {sigfd, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        if (p[1].revents & POLLIN) {
            signalfd_siginfo si;
            while (::read(sigfd, &si, sizeof si) > 0) {
            }
            reap_runs();
        }
        if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        int fds[kMaxPassedFds];
        int got = 0;
        ssize_t n = recv_with_fds(ctl, buf, kBufferBytes, fds, kMaxPassedFds, got, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {  // the server is gone: so is the template
            for (int k = 0; k < got; ++k) ::close(fds[k]);
            ::close(sigfd);
            ::close(pidns);
            ::close(netns);
            Py_RETURN_NONE;
        }
        forget_request(request);
        std::string error;
        pid_t pid = -1;
        try {
            request = decode_request(std::string_view(buf, static_cast<std::size_t>(n)));
            if (got != request_fd_count(request)) throw BadRequest("the request's descriptors are missing");
            pid = template_::fork_run(request, fds, pidns, hooks, error);
        } catch (const std::exception& e) {
            error = e.what();
        }
        if (pid == 0) return run_of(request);
        answer_request(ctl, pid, error, buf, static_cast<std::size_t>(n), fds, got);
        template_::make_spare_network(netns);  // the next run's, while this one starts
    }
}

PyObject* lower_capabilities(PyObject*, PyObject*) {
    if (int e = template_::lower_capabilities(); e != 0) {
        errno = e;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

// make_undumpable(): a run's in-jail session server makes itself non-dumpable with this
// (pyjail_server._become_unreachable says why it must) instead of through ctypes: in a fork of
// the template, ctypes' CDLL(None) and its function lookup copied about 150 of the template's
// pages, half a millisecond of every session's start.
PyObject* make_undumpable(PyObject*, PyObject*) {
    if (::prctl(PR_SET_DUMPABLE, 0) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    if (::prctl(PR_GET_DUMPABLE) != 0) {
        PyErr_SetString(PyExc_OSError, "prctl(PR_SET_DUMPABLE, 0) left the process dumpable");
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyObject* collapse_into_huge_pages(PyObject*, PyObject*) {
    template_::CollapseResult r = template_::collapse_into_huge_pages();
    g_memory_note = template_::describe_collapse(r);
    template_::settle_arena_blocks();
    Py_RETURN_NONE;
}

// keep_numpy_generator(bit_generator): numpy.random's global MT19937, whose state each run then
// reseeds in place (numpy_reseed.hpp). True once its state was found where numpy's capsule
// says and holding what numpy reports; False (nothing kept) for any other generator or layout.
PyObject* keep_numpy_generator(PyObject*, PyObject* bit_generator) {
    if (std::strcmp(Py_TYPE(bit_generator)->tp_name, "numpy.random._mt19937.MT19937") != 0) Py_RETURN_FALSE;
    // numpy's bitgen_t (numpy/random/bitgen.h, its C API for bit generators): the state first.
    PyObject* capsule = PyObject_GetAttrString(bit_generator, "capsule");
    void* bitgen = capsule != nullptr ? PyCapsule_GetPointer(capsule, "BitGenerator") : nullptr;
    Py_XDECREF(capsule);
    // numpy's own report: {'bit_generator': 'MT19937', 'state': {'key': uint32[624], 'pos': int}}.
    PyObject* report = bitgen != nullptr ? PyObject_GetAttrString(bit_generator, "state") : nullptr;
    PyObject* inner = report != nullptr && PyDict_Check(report) ? PyDict_GetItemString(report, "state") : nullptr;
    PyObject* key = inner != nullptr && PyDict_Check(inner) ? PyDict_GetItemString(inner, "key") : nullptr;
    PyObject* pos = inner != nullptr && PyDict_Check(inner) ? PyDict_GetItemString(inner, "pos") : nullptr;
    bool same = false;
    Py_buffer view{};
    if (key != nullptr && pos != nullptr && PyLong_Check(pos) &&
        PyObject_GetBuffer(key, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
        auto* state = *static_cast<template_::Mt19937State**>(bitgen);
        same = view.itemsize == 4 && view.format != nullptr && std::strcmp(view.format, "I") == 0 &&
               template_::mt19937_state_is(*state, static_cast<const std::uint32_t*>(view.buf),
                                           static_cast<std::size_t>(view.len) / 4, PyLong_AsLong(pos));
        if (same) template_::keep_numpy_state(state);
        PyBuffer_Release(&view);
    }
    Py_XDECREF(report);
    PyErr_Clear();
    return PyBool_FromLong(same);
}

// reseed_numpy(): in a run, the kept generator's key from the kernel's entropy. False: nothing
// kept, or no entropy (the caller reseeds through numpy).
PyObject* reseed_numpy(PyObject*, PyObject*) { return PyBool_FromLong(template_::reseed_numpy_state()); }

// The interpreter's arena allocator before ours: the arenas made before this module was
// imported are its, and so is any request not of an arena's size.
PyObjectArenaAllocator g_previous_arenas;

void* arena_alloc(void*, size_t size) {
    if (size != template_::kArenaSlot) return g_previous_arenas.alloc(g_previous_arenas.ctx, size);
    return template_::take_arena();
}

void arena_free(void*, void* at, size_t size) {
    if (size != template_::kArenaSlot || !template_::give_back_arena(at))
        g_previous_arenas.free(g_previous_arenas.ctx, at, size);
}

// The names of `modules` (sys.modules) that `names` (a frozenset: the template's) lacks, and
// "__main__". Looked at through borrowed references: in a run, whose pages are the template's
// until written, a loop in Python raised every name's reference count, and so copied a page
// per name (about 600 with pandas: a millisecond of every run's exit).
PyObject* modules_not_in(PyObject*, PyObject* args) {
    PyObject* modules = nullptr;
    PyObject* names = nullptr;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &modules, &PyFrozenSet_Type, &names)) return nullptr;
    PyObject* out = PyList_New(0);
    if (out == nullptr) return nullptr;
    Py_ssize_t pos = 0;
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    while (PyDict_Next(modules, &pos, &key, &value)) {
        int known = PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, "__main__") == 0
                        ? 0
                        : PySet_Contains(names, key);
        if (known < 0) {  // an unhashable key: not a module the template had
            PyErr_Clear();
            known = 0;
        }
        if (known == 0 && PyList_Append(out, key) != 0) {
            Py_DECREF(out);
            return nullptr;
        }
    }
    return out;
}

PyMethodDef kMethods[] = {
    {"modules_not_in", modules_not_in, METH_VARARGS,
     "modules_not_in(modules, names): the keys of the dict `modules` not in the frozenset `names`, "
     "and '__main__', without touching (and so copying) the others."},
    {"lower_capabilities", lower_capabilities, METH_NOARGS,
     "lower_capabilities(): the template's capabilities stay permitted only (not effective, not "
     "ambient) until serve() sets a run up. Called before any module of the rootfs runs."},
    {"make_undumpable", make_undumpable, METH_NOARGS,
     "make_undumpable(): prctl(PR_SET_DUMPABLE, 0), checked; OSError if the process stays "
     "dumpable. For a run's session server, which must be unreachable from its own program."},
    {"collapse_into_huge_pages", collapse_into_huge_pages, METH_NOARGS,
     "collapse_into_huge_pages(): the template's settled anonymous memory in 2 MiB pages, so that "
     "each run's fork and exit copy and free fewer page-table entries (huge_pages.hpp). What it did "
     "goes to the server with \"ready\"; never raises."},
    {"keep_numpy_generator", keep_numpy_generator, METH_O,
     "keep_numpy_generator(bit_generator): in the template, numpy.random's global MT19937, which "
     "each run's reseed_numpy() then reseeds in place. False if it is not numpy's MT19937 as this "
     "module knows it (nothing kept)."},
    {"reseed_numpy", reseed_numpy, METH_NOARGS,
     "reseed_numpy(): in a run, the kept generator's key from the kernel's entropy, touching none "
     "of the template's pages but its own. False: nothing kept, or no entropy."},
    {"serve", serve, METH_VARARGS,
     "serve(fd, reaper): answer run requests on fd until it closes (None); in a run's program, "
     "return (kind, target, args, options, env). reaper: the path of pyjail-reaper."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_pyjail_template",
                       "The C half of a pyjail template: forks runs that are jails of their own.", -1,
                       kMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__pyjail_template() {
    // Imported first thing in the template (pyjail_template.py), before site and the
    // preloads: nearly all their objects land in arenas that line up into huge pages
    // (arenas.hpp).
    // Once: installed twice, ours would become its own fallback.
    if (g_previous_arenas.alloc == nullptr) {
        template_::arena_fork_guard();
        PyObject_GetArenaAllocator(&g_previous_arenas);
        PyObjectArenaAllocator ours{nullptr, arena_alloc, arena_free};
        PyObject_SetArenaAllocator(&ours);
    }
    return PyModule_Create(&kModule);
}

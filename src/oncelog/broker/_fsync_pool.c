/* fsync threads that never take the GIL (issue 12).

   The group-commit flusher (broker/durability.py) prepares each fsync on the event loop
   (which files, pinned open) and finishes it there (the recovery point, the waiters); in
   between, one of these threads runs fsync(2) on a descriptor and reports the outcome
   through an eventfd the loop watches. A Python thread doing the same takes the GIL when
   its job arrives and again when fsync returns, while the loop holds it nearly all the
   time under load; with 16 transactional producers the loop thread slept in a futex (the
   GIL, locks) for 10 % of the wall time (README, "The fsync threads without the GIL").

   The threads block every signal (the loop thread handles them) and retry an fsync
   interrupted all the same (EINTR), as os.fsync does. Linux only (eventfd).

   Given a ``priority``, the threads run SCHED_FIFO at it (their I/O stays best-effort,
   see keep_io_class): a woken thread takes a CPU at once instead of waiting behind
   the loop thread and the producers. On the 2-core VM (ext4 without a journal) this
   mattered more than the disk: a 1 MiB fsync took 0.8 ms alone, but with 1 producer
   committing a transaction every 1,000 records its thread waited 2.5 ms at p90 from the
   hand-off to entering fsync, and the syscall took 4.0 ms at p90 (it sleeps for the I/O
   and waits again for a CPU to finish); with SCHED_FIFO 0.06 and 1.1 ms (README, "The
   fsync threads' wait for a CPU", issue 12). What they can take from the loop: a thread
   runs jobs back to back without yielding while its queue holds some, and an fsync's
   kernel work grows with the dirty data it writes back (about 0.1 ms of CPU per MiB
   here), so a flush covering much unflushed data (a large flush.ms, a follower catching
   up) keeps up to two of the eight threads on the two cores for that long; the kernel's
   real-time throttling (sched_rt_runtime_us, 950000 of 1000000 by default) leaves the
   others 5 % of each CPU in any case. Work the kernel hands to its own normal-priority
   threads (a journal commit on a journaled file system) is not sped up. Without the right
   (no CAP_SYS_NICE, RLIMIT_RTPRIO below the priority) every thread runs SCHED_OTHER:
   ``realtime`` says which. ``lock`` is shared with the loop (a plain mutex): a real-time
   thread waiting for it waits for the loop, which holds it only to move a list.

   FsyncPool(threads, priority=0)
                           start ``threads`` threads (SCHED_FIFO at ``priority`` if > 0)
   pool.realtime           True if every thread got SCHED_FIFO (as started)
   pool.fileno()           the eventfd: readable once a job is done
   pool.submit(token, fd)  fsync ``fd`` on a thread; ``token`` comes back with the outcome
   pool.collect()          [(token, errno), ...] of the jobs done since the last call
                           (errno 0: the fsync succeeded); resets the eventfd
   pool.stop()             finish the queued jobs, end the threads; submit refuses after

   The descriptor must stay open until its token is collected (the caller pins it). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The I/O priority ABI of ioprio_get/ioprio_set (the kernel's linux/ioprio.h, which only
   kernel headers from 5.15 on ship; the values are the kernel's since 2.6.13). */
#define IOPRIO_CLASS_SHIFT 13
#define IOPRIO_PRIO_CLASS(value) (((value) >> IOPRIO_CLASS_SHIFT) & 0x07)
#define IOPRIO_PRIO_VALUE(class, data) (((class) << IOPRIO_CLASS_SHIFT) | (data))
enum { IOPRIO_CLASS_NONE = 0, IOPRIO_CLASS_BE = 2 };
enum { IOPRIO_WHO_PROCESS = 1 };

typedef struct Job {
    struct Job *next;
    long long token;
    int fd;
    int error;
} Job;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t wake;
    Job *queued, *queued_tail; /* to fsync, oldest first */
    Job *done, *done_tail;     /* fsynced, not yet collected */
    int event_fd;
    int stopping;
    int started;  /* threads running (joined by stop) */
    int lock_ready;
    int realtime; /* every thread runs SCHED_FIFO */
    pthread_t *threads;
} FsyncPool;

static void append(Job **head, Job **tail, Job *job) {
    job->next = NULL;
    if (*tail != NULL)
        (*tail)->next = job;
    else
        *head = job;
    *tail = job;
}

/* A thread with no I/O priority of its own (class NONE) gets its class from its CPU
   policy: SCHED_FIFO would make its fsync writes real-time I/O, dispatched before every
   other request of the device (mq-deadline ages the others only after 10 s). So a thread
   of class NONE takes, explicitly, what the kernel derives for a SCHED_OTHER task of its
   nice value (best-effort, level (nice + 20) / 5); a class set by the operator (ionice of
   the broker, inherited) is kept. Only the CPU policy changes. */
static void keep_io_class(void) {
    int current = (int)syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0);
    if (current < 0 || IOPRIO_PRIO_CLASS(current) != IOPRIO_CLASS_NONE)
        return;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0); /* this thread's */
    if (errno != 0)
        nice = 0;
    syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0,
            IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, (nice + 20) / 5));
}

static void *serve(void *arg) {
    FsyncPool *pool = arg;
    keep_io_class();
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        while (pool->queued == NULL && !pool->stopping)
            pthread_cond_wait(&pool->wake, &pool->lock);
        Job *job = pool->queued;
        if (job == NULL) { /* stopping, and every queued job taken */
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        pool->queued = job->next;
        if (pool->queued == NULL)
            pool->queued_tail = NULL;
        pthread_mutex_unlock(&pool->lock);

        int rc;
        do
            rc = fsync(job->fd);
        while (rc < 0 && errno == EINTR);
        job->error = rc == 0 ? 0 : errno;

        pthread_mutex_lock(&pool->lock);
        append(&pool->done, &pool->done_tail, job);
        pthread_mutex_unlock(&pool->lock);
        uint64_t one = 1;
        while (write(pool->event_fd, &one, sizeof one) < 0 && errno == EINTR) {
        }
    }
}

static void set_policy(pthread_attr_t *attr, int priority) {
    struct sched_param param = {.sched_priority = priority};
    pthread_attr_setschedpolicy(attr, priority > 0 ? SCHED_FIFO : SCHED_OTHER);
    pthread_attr_setschedparam(attr, &param);
}

static void stop_threads(FsyncPool *pool) {
    if (!pool->lock_ready)
        return;
    pthread_mutex_lock(&pool->lock);
    pool->stopping = 1;
    pthread_cond_broadcast(&pool->wake);
    int started = pool->started; /* taken once: a second stop joins nothing */
    pool->started = 0;
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < started; i++)
        pthread_join(pool->threads[i], NULL);
}

static int pool_init(FsyncPool *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"threads", "priority", NULL};
    int count, priority = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|i", kwlist, &count, &priority))
        return -1;
    if (self->lock_ready || self->event_fd >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "FsyncPool is already initialised");
        return -1;
    }
    if (count < 1) {
        PyErr_SetString(PyExc_ValueError, "threads must be at least 1");
        return -1;
    }
    if (priority < 0 || priority > sched_get_priority_max(SCHED_FIFO)) {
        PyErr_SetString(PyExc_ValueError, "priority out of SCHED_FIFO's range (0: none)");
        return -1;
    }
    self->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->event_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->threads = PyMem_RawCalloc((size_t)count, sizeof(pthread_t));
    if (self->threads == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    self->lock_ready = 1;
    /* The threads inherit the creator's signal mask: every signal blocked from their
       first instruction on, then the creator's mask back. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    /* The policy is the attribute's, never the creator's (an embedder's real-time thread
       would otherwise pass its own on): SCHED_FIFO at ``priority``, else SCHED_OTHER. */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
    self->realtime = priority > 0;
    set_policy(&attr, priority);
    for (int i = 0; i < count; i++) {
        int rc = pthread_create(&self->threads[i], &attr, serve, self);
        /* No SCHED_FIFO for this one (EPERM: no right to it; a sandbox may answer
           otherwise): none of them gets it, rather than a broker that does not start. */
        if (rc != 0 && self->realtime) {
            self->realtime = 0;
            set_policy(&attr, 0);
            struct sched_param normal = {.sched_priority = 0};
            for (int j = 0; j < i; j++)
                pthread_setschedparam(self->threads[j], SCHED_OTHER, &normal);
            rc = pthread_create(&self->threads[i], &attr, serve, self);
        }
        if (rc == 0)
            pthread_setname_np(self->threads[i], "fsync_pool");
        if (rc != 0) {
            pthread_attr_destroy(&attr);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            Py_BEGIN_ALLOW_THREADS
            stop_threads(self);
            Py_END_ALLOW_THREADS
            errno = rc;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        self->started++;
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 0;
}

static PyObject *pool_fileno(FsyncPool *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(self->event_fd);
}

static PyObject *pool_submit(FsyncPool *self, PyObject *args) {
    long long token;
    int fd;
    if (!PyArg_ParseTuple(args, "Li", &token, &fd))
        return NULL;
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative descriptor");
        return NULL;
    }
    if (!self->lock_ready) {
        PyErr_SetString(PyExc_RuntimeError, "the fsync threads have stopped");
        return NULL;
    }
    Job *job = PyMem_RawMalloc(sizeof(Job));
    if (job == NULL)
        return PyErr_NoMemory();
    job->token = token;
    job->fd = fd;
    job->error = 0;
    pthread_mutex_lock(&self->lock);
    int stopping = self->stopping; /* under the lock: no thread would take a later job */
    if (!stopping) {
        append(&self->queued, &self->queued_tail, job);
        pthread_cond_signal(&self->wake);
    }
    pthread_mutex_unlock(&self->lock);
    if (stopping) {
        PyMem_RawFree(job);
        PyErr_SetString(PyExc_RuntimeError, "the fsync threads have stopped");
        return NULL;
    }
    Py_RETURN_NONE;
}

static void free_jobs(Job *job) {
    while (job != NULL) {
        Job *next = job->next;
        PyMem_RawFree(job);
        job = next;
    }
}

/* Outcomes taken off ``done`` but not handed to Python go back in front of it, and the
   eventfd is written again so that the loop collects them. */
static void put_back(FsyncPool *pool, Job *first) {
    if (first == NULL)
        return;
    Job *last = first;
    while (last->next != NULL)
        last = last->next;
    pthread_mutex_lock(&pool->lock);
    last->next = pool->done;
    if (pool->done == NULL)
        pool->done_tail = last;
    pool->done = first;
    pthread_mutex_unlock(&pool->lock);
    uint64_t one = 1;
    while (write(pool->event_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
}

static PyObject *pool_collect(FsyncPool *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->lock_ready)
        return PyList_New(0);
    uint64_t count;
    /* Reset the eventfd before taking the list: a job done after the take writes it
       again, so none is left unreported. */
    if (read(self->event_fd, &count, sizeof count) < 0 && errno != EAGAIN && errno != EINTR)
        return PyErr_SetFromErrno(PyExc_OSError);
    pthread_mutex_lock(&self->lock);
    Job *first = self->done;
    self->done = self->done_tail = NULL;
    pthread_mutex_unlock(&self->lock);
    PyObject *result = PyList_New(0);
    Job *job = first;
    while (result != NULL && job != NULL) {
        PyObject *item = Py_BuildValue("(Li)", job->token, job->error);
        if (item == NULL || PyList_Append(result, item) < 0)
            Py_CLEAR(result);
        Py_XDECREF(item);
        job = job->next;
    }
    if (result == NULL) { /* out of memory: every outcome goes back, reported again later */
        put_back(self, first);
        return NULL;
    }
    free_jobs(first);
    return result;
}

static PyObject *pool_stop(FsyncPool *self, PyObject *Py_UNUSED(ignored)) {
    Py_BEGIN_ALLOW_THREADS
    stop_threads(self);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static void pool_dealloc(FsyncPool *self) {
    Py_BEGIN_ALLOW_THREADS
    stop_threads(self);
    Py_END_ALLOW_THREADS
    if (self->lock_ready) {
        free_jobs(self->queued);
        free_jobs(self->done);
        pthread_mutex_destroy(&self->lock);
        pthread_cond_destroy(&self->wake);
    }
    if (self->event_fd >= 0)
        close(self->event_fd);
    PyMem_RawFree(self->threads);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    FsyncPool *self = (FsyncPool *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->event_fd = -1;
    return (PyObject *)self;
}

static PyObject *pool_realtime(FsyncPool *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->realtime);
}

static PyGetSetDef pool_getset[] = {
    {"realtime", (getter)pool_realtime, NULL, "True if every thread got SCHED_FIFO.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef pool_methods[] = {
    {"fileno", (PyCFunction)pool_fileno, METH_NOARGS, "The eventfd, readable once a job is done."},
    {"submit", (PyCFunction)pool_submit, METH_VARARGS, "submit(token, fd): fsync fd on a thread."},
    {"collect", (PyCFunction)pool_collect, METH_NOARGS,
     "[(token, errno), ...] of the jobs done since the last call."},
    {"stop", (PyCFunction)pool_stop, METH_NOARGS, "Finish the queued jobs and end the threads."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FsyncPoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "oncelog.broker._fsync_pool.FsyncPool",
    .tp_basicsize = sizeof(FsyncPool),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "fsync threads that never take the GIL; outcomes through an eventfd.",
    .tp_new = pool_new,
    .tp_init = (initproc)pool_init,
    .tp_dealloc = (destructor)pool_dealloc,
    .tp_methods = pool_methods,
    .tp_getset = pool_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fsync_pool", "fsync threads that never take the GIL.", -1, NULL,
};

PyMODINIT_FUNC PyInit__fsync_pool(void) {
    if (PyType_Ready(&FsyncPoolType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FsyncPoolType);
    if (PyModule_AddObject(m, "FsyncPool", (PyObject *)&FsyncPoolType) < 0) {
        Py_DECREF(&FsyncPoolType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

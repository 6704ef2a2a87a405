// SPDX-License-Identifier: GPL-3.0-or-later
// Copyright: Contributors to the trainops.pct_launch collection
/*
 * A stand-in libcuda.so.1 for tests of the CUDA probe (plugins/module_utils/_cuda_probe.py): the CUDA Driver API
 * calls the probe makes, with the real C signatures (cuda.h) and the real CUresult codes, names and texts of the
 * errors it handles (https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html). No GPU is touched.
 * Built by tests/integration/fake_libcuda.py. Its behaviour comes from the environment, read at cuInit:
 *
 *   FAKE_CUDA_DEVICES=N        GPUs of the node (default: as many as FAKE_CUDA_UUIDS names, else 1; at most 16)
 *   FAKE_CUDA_UUIDS=a,b        their UUIDs as nvidia-smi prints them (default GPU-5a5a000N-1111-2222-3333-00000000000N)
 *   FAKE_CUDA_BUS_IDS=a,b      their PCI bus ids as cuDeviceGetPCIBusId gives them (default 0000:2A:00.0, 0000:2B:00.0, ...)
 *   FAKE_CUDA_FAIL=call:code[@ordinal],...   the call (cuInit, cuCtxCreate_v2, ...) returns code (on that device only)
 *   FAKE_CUDA_HANG=call        the call never returns
 *   FAKE_CUDA_ABORT=call       the call aborts the process (SIGABRT)
 *   FAKE_CUDA_RECORD=path      appends NUL-terminated records: uid=N, CUDA_VISIBLE_DEVICES=... (or CUDA_VISIBLE_DEVICES
 *                              unset), ctx_create=N, ctx_destroy=N
 *
 * A FAKE_CUDA_* variable that is not in the environment is read from the configuration file /etc/fake-cuda.conf (or the
 * file FAKE_CUDA_CONF names, from the environment only), read again at each cuInit: the CUDA probe runs with the job's
 * environment alone, so a test scripts a container's libcuda there. One setting a line, with the same names as the
 * environment's, `#` comments and blank lines ignored, a variable set in the environment (even empty) wins:
 *
 *   # /etc/fake-cuda.conf
 *   FAKE_CUDA_FAIL=cuInit:999
 *   FAKE_CUDA_DEVICES=4
 *
 * CUDA_VISIBLE_DEVICES is read as the driver reads it: a comma-separated list of indexes or UUIDs (a UUID may be given by
 * a unique prefix); the first entry that names no GPU ends the list; no GPU left: cuInit returns CUDA_ERROR_NO_DEVICE.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUuuid_st { char bytes[16]; } CUuuid;

#define MAX_GPUS 16
#define FIELD 96
#define CONF "/etc/fake-cuda.conf"
#define CONF_LINE 4096

static const struct { CUresult code; const char *name; const char *text; } ERRORS[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int initialised;
static int gpus;                       /* GPUs of the node */
static int visible[MAX_GPUS];          /* CUDA ordinal -> GPU of the node */
static int visible_count;
static char uuids[MAX_GPUS][FIELD];
static char bus_ids[MAX_GPUS][FIELD];
static char contexts[MAX_GPUS];        /* a context is the address of its device's byte */

/* The FAKE_CUDA_* settings: the environment's, else the configuration file's (load_settings at cuInit). */
static const char *const KEYS[] = {"FAKE_CUDA_DEVICES", "FAKE_CUDA_UUIDS", "FAKE_CUDA_BUS_IDS", "FAKE_CUDA_FAIL",
                                   "FAKE_CUDA_HANG", "FAKE_CUDA_ABORT", "FAKE_CUDA_RECORD"};
#define KEY_COUNT (sizeof KEYS / sizeof KEYS[0])
static char conf_values[KEY_COUNT][CONF_LINE];
static int conf_set[KEY_COUNT];

/* The value of the setting name: the environment's, else the configuration file's, else NULL. */
static const char *setting(const char *name) {
    const char *value = getenv(name);
    if (value) return value;
    for (size_t i = 0; i < KEY_COUNT; i++) {
        if (strcmp(KEYS[i], name) == 0) return conf_set[i] ? conf_values[i] : NULL;
    }
    return NULL;
}

/* One `NAME=VALUE` line of the configuration file (its newline removed) into conf_values. */
static void conf_line(char *line) {
    while (*line == ' ' || *line == '\t') line++;
    if (*line == '#' || *line == '\0') return;
    char *equal = strchr(line, '=');
    if (!equal) return;
    *equal = '\0';
    for (size_t i = 0; i < KEY_COUNT; i++) {
        if (strcmp(KEYS[i], line) == 0) {
            snprintf(conf_values[i], CONF_LINE, "%s", equal + 1);
            conf_set[i] = 1;
        }
    }
}

/* Read the configuration file again (none, or one this user cannot read: no settings from it). */
static void load_settings(void) {
    const char *path = getenv("FAKE_CUDA_CONF");
    FILE *file = fopen(path ? path : CONF, "r");
    char line[CONF_LINE];
    memset(conf_set, 0, sizeof conf_set);
    if (!file) return;
    while (fgets(line, sizeof line, file)) {
        line[strcspn(line, "\r\n")] = '\0';
        conf_line(line);
    }
    fclose(file);
}

static void record(const char *key, const char *value) {
    const char *path = setting("FAKE_CUDA_RECORD");
    FILE *file = path ? fopen(path, "a") : NULL;
    if (file) {
        fprintf(file, "%s=%s", key, value);
        fputc('\0', file);
        fclose(file);
    }
}

static void record_number(const char *key, long number) {
    char text[32];
    snprintf(text, sizeof text, "%ld", number);
    record(key, text);
}

/* The code FAKE_CUDA_FAIL gives call (on device ordinal; -1: any), else 0; hangs or aborts as asked. */
static CUresult scripted(const char *call, int ordinal) {
    const char *hang = setting("FAKE_CUDA_HANG"), *stop = setting("FAKE_CUDA_ABORT"), *fail = setting("FAKE_CUDA_FAIL");
    size_t length = strlen(call);
    if (hang && strcmp(hang, call) == 0) {
        for (;;) pause();
    }
    if (stop && strcmp(stop, call) == 0) abort();
    for (const char *item = fail; item && *item; item = strchr(item, ',') ? strchr(item, ',') + 1 : NULL) {
        if (strncmp(item, call, length) != 0 || item[length] != ':') continue;
        char *end;
        long code = strtol(item + length + 1, &end, 10);
        if (*end == '@' && strtol(end + 1, NULL, 10) != ordinal) continue;
        return (CUresult)code;
    }
    return 0;
}

/* The i-th comma-separated entry of text (NULL: none) into out (empty when there is none). */
static void entry(const char *text, int i, char *out) {
    out[0] = '\0';
    for (; text && i > 0; i--) text = strchr(text, ',') ? strchr(text, ',') + 1 : NULL;
    if (!text) return;
    size_t length = strcspn(text, ",");
    if (length >= FIELD) length = FIELD - 1;
    memcpy(out, text, length);
    out[length] = '\0';
}

static void node_gpus(void) {
    const char *count = setting("FAKE_CUDA_DEVICES"), *given = setting("FAKE_CUDA_UUIDS"), *buses = setting("FAKE_CUDA_BUS_IDS");
    gpus = 1;
    if (given && *given) {
        gpus = 1;
        for (const char *c = given; *c; c++) gpus += *c == ',';
    }
    if (count) gpus = atoi(count);
    if (gpus < 0) gpus = 0;
    if (gpus > MAX_GPUS) gpus = MAX_GPUS;
    for (int i = 0; i < gpus; i++) {
        entry(given, i, uuids[i]);
        if (!uuids[i][0]) snprintf(uuids[i], FIELD, "GPU-5a5a%04x-1111-2222-3333-%012x", i, i);
        entry(buses, i, bus_ids[i]);
        if (!bus_ids[i][0]) snprintf(bus_ids[i], FIELD, "0000:%02X:00.0", 0x2A + i);
    }
}

/* The GPU of the node an entry of CUDA_VISIBLE_DEVICES names, or -1. */
static int named(const char *text) {
    char *end;
    if (*text >= '0' && *text <= '9') {
        long index = strtol(text, &end, 10);
        return *end == '\0' && index < gpus ? (int)index : -1;
    }
    int found = -1;
    for (int i = 0; i < gpus && strncmp(text, "GPU-", 4) == 0; i++) {
        if (strncmp(uuids[i], text, strlen(text)) == 0) {
            if (found >= 0) return -1;  /* an ambiguous prefix */
            found = i;
        }
    }
    return found;
}

static void visible_gpus(void) {
    const char *text = getenv("CUDA_VISIBLE_DEVICES");
    char item[FIELD];
    visible_count = 0;
    if (!text) {
        for (int i = 0; i < gpus; i++) visible[visible_count++] = i;
        return;
    }
    for (int i = 0; visible_count < MAX_GPUS; i++) {
        entry(text, i, item);
        int gpu = named(item);
        if (gpu < 0) return;
        visible[visible_count++] = gpu;
    }
}

CUresult cuInit(unsigned int flags) {
    const char *text = getenv("CUDA_VISIBLE_DEVICES");
    load_settings();
    record_number("uid", (long)getuid());
    record(text ? "CUDA_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES unset", text ? text : "");
    CUresult code = scripted("cuInit", -1);
    if (code) return code;
    if (flags) return 1;
    node_gpus();
    visible_gpus();
    if (!visible_count) return 100;
    initialised = 1;
    return 0;
}

CUresult cuDeviceGetCount(int *count) {
    if (!initialised) return 3;
    CUresult code = scripted("cuDeviceGetCount", -1);
    if (code) return code;
    if (!count) return 1;
    *count = visible_count;
    return 0;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialised) return 3;
    if (!device) return 1;
    if (ordinal < 0 || ordinal >= visible_count) return 101;
    CUresult code = scripted("cuDeviceGet", ordinal);
    if (code) return code;
    *device = ordinal;
    return 0;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice device, const char *call) {
    if (!initialised) return 3;
    if (!uuid) return 1;
    if (device < 0 || device >= visible_count) return 101;
    CUresult code = scripted(call, device);
    if (code) return code;
    const char *text = uuids[visible[device]];
    int n = 0;
    for (const char *c = strncmp(text, "GPU-", 4) == 0 ? text + 4 : text; *c && n < 32; c++) {
        if (*c == '-') continue;
        char digit[2] = {*c, '\0'};
        long value = strtol(digit, NULL, 16);
        uuid->bytes[n / 2] = (char)(n % 2 ? (uuid->bytes[n / 2] | value) : value << 4);
        n++;
    }
    return 0;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device) { return device_uuid(uuid, device, "cuDeviceGetUuid"); }

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) { return device_uuid(uuid, device, "cuDeviceGetUuid_v2"); }

CUresult cuDeviceGetPCIBusId(char *bus_id, int length, CUdevice device) {
    if (!initialised) return 3;
    if (!bus_id || length <= 0) return 1;
    if (device < 0 || device >= visible_count) return 101;
    CUresult code = scripted("cuDeviceGetPCIBusId", device);
    if (code) return code;
    snprintf(bus_id, (size_t)length, "%s", bus_ids[visible[device]]);
    return 0;
}

CUresult cuCtxCreate_v2(CUcontext *context, unsigned int flags, CUdevice device) {
    if (!initialised) return 3;
    if (!context || flags) return 1;
    if (device < 0 || device >= visible_count) return 101;
    CUresult code = scripted("cuCtxCreate_v2", device);
    if (code) return code;
    *context = (CUcontext)(void *)&contexts[device];
    record_number("ctx_create", device);
    return 0;
}

CUresult cuCtxDestroy_v2(CUcontext context) {
    char *byte = (char *)(void *)context;
    if (!initialised) return 3;
    if (byte < contexts || byte >= contexts + MAX_GPUS) return 201;
    CUresult code = scripted("cuCtxDestroy_v2", (int)(byte - contexts));
    if (code) return code;
    record_number("ctx_destroy", (long)(byte - contexts));
    return 0;
}

static CUresult error_field(CUresult error, const char **out, int text) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++) {
        if (ERRORS[i].code == error) {
            *out = text ? ERRORS[i].text : ERRORS[i].name;
            return 0;
        }
    }
    *out = NULL;
    return 1;
}

CUresult cuGetErrorName(CUresult error, const char **name) { return name ? error_field(error, name, 0) : 1; }

CUresult cuGetErrorString(CUresult error, const char **text) { return text ? error_field(error, text, 1) : 1; }

/*
 * The ggml device API (ggml_backend_dev_*, ggml_backend_buft_*) with two virtual GPUs.
 *
 * main() sets LLAMA_VIRTUAL_GPUS=24GiB,8GiB before the first library call (the library reads
 * it once, when its device registry is created), so the expected devices are, in upstream's
 * registry order (GPU backends before the CPU): VGPU0 (24 GiB), VGPU1 (8 GiB), CPU.
 */
#define _POSIX_C_SOURCE 200112L
#include "llama.h"

#include <stdint.h>

#include "harness.h"
#include "logcap.h"

#define GIB ((size_t)1 << 30)

TEST(device_list) {
    size_t i;
    CHECK_INT(ggml_backend_dev_count(), 3);
    for (i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        size_t free = 0, total = 0;
        CHECK_NOT_NULL(dev);
        ggml_backend_dev_memory(dev, &free, &total);
        printf("device %zu: %s (%s) type %d, %zu MiB free of %zu MiB\n", i,
               ggml_backend_dev_name(dev), ggml_backend_dev_description(dev),
               (int)ggml_backend_dev_type(dev), free >> 20, total >> 20);
    }
    CHECK_STR(ggml_backend_dev_name(ggml_backend_dev_get(0)), "VGPU0");
    CHECK_STR(ggml_backend_dev_name(ggml_backend_dev_get(1)), "VGPU1");
    CHECK_STR(ggml_backend_dev_name(ggml_backend_dev_get(2)), "CPU");
    CHECK_INT(ggml_backend_dev_type(ggml_backend_dev_get(0)), GGML_BACKEND_DEVICE_TYPE_GPU);
    CHECK_INT(ggml_backend_dev_type(ggml_backend_dev_get(1)), GGML_BACKEND_DEVICE_TYPE_GPU);
    CHECK_INT(ggml_backend_dev_type(ggml_backend_dev_get(2)), GGML_BACKEND_DEVICE_TYPE_CPU);
    CHECK_STR(ggml_backend_dev_description(ggml_backend_dev_get(0)),
              "llama-hotswap virtual GPU (24 GiB)");
    CHECK_STR(ggml_backend_dev_description(ggml_backend_dev_get(1)),
              "llama-hotswap virtual GPU (8 GiB)");
    CHECK(ggml_backend_dev_description(ggml_backend_dev_get(2)) != NULL);
    /* Handles and strings are static: the same pointers every time. */
    CHECK(ggml_backend_dev_get(1) == ggml_backend_dev_get(1));
    CHECK(ggml_backend_dev_name(ggml_backend_dev_get(1)) ==
          ggml_backend_dev_name(ggml_backend_dev_get(1)));
    CHECK(llama_supports_gpu_offload());
}

TEST(device_memory) {
    size_t free = 1, total = 1;
    ggml_backend_dev_memory(ggml_backend_dev_get(0), &free, &total);
    CHECK(free == 24 * GIB);
    CHECK(total == 24 * GIB);
    ggml_backend_dev_memory(ggml_backend_dev_get(1), &free, &total);
    CHECK(free == 8 * GIB);
    CHECK(total == 8 * GIB);
    /* The CPU: physical memory, all of it reported free (as upstream). */
    ggml_backend_dev_memory(ggml_backend_dev_get(2), &free, &total);
    CHECK(total > 0);
    CHECK(free == total);
}

TEST(device_props) {
    struct ggml_backend_dev_props props;
    ggml_backend_dev_t gpu = ggml_backend_dev_get(1);
    ggml_backend_dev_t cpu = ggml_backend_dev_get(2);
    memset(&props, 0xAB, sizeof props);
    ggml_backend_dev_get_props(gpu, &props);
    CHECK(props.name == ggml_backend_dev_name(gpu));
    CHECK(props.description == ggml_backend_dev_description(gpu));
    CHECK(props.memory_free == 8 * GIB);
    CHECK(props.memory_total == 8 * GIB);
    CHECK_INT(props.type, GGML_BACKEND_DEVICE_TYPE_GPU);
    CHECK_NULL(props.device_id);
    CHECK(props.caps.mmap_support);
    CHECK(!props.caps.buffer_from_host_ptr);
    ggml_backend_dev_get_props(cpu, &props);
    CHECK_STR(props.name, "CPU");
    CHECK_INT(props.type, GGML_BACKEND_DEVICE_TYPE_CPU);
    CHECK(props.caps.buffer_from_host_ptr);
    CHECK(props.caps.mmap_support);
}

TEST(device_lookup) {
    CHECK(ggml_backend_dev_by_name("VGPU1") == ggml_backend_dev_get(1));
    /* case-insensitive, as upstream */
    CHECK(ggml_backend_dev_by_name("vgpu0") == ggml_backend_dev_get(0));
    CHECK(ggml_backend_dev_by_name("cpu") == ggml_backend_dev_get(2));
    CHECK_NULL(ggml_backend_dev_by_name("VGPU2"));
    CHECK_NULL(ggml_backend_dev_by_name(""));
    CHECK(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_GPU) == ggml_backend_dev_get(0));
    CHECK(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU) == ggml_backend_dev_get(2));
    CHECK_NULL(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_IGPU));
    CHECK_NULL(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_ACCEL));
}

TEST(buffer_types) {
    ggml_backend_buffer_type_t cpu = ggml_backend_cpu_buffer_type();
    CHECK_NOT_NULL(cpu);
    CHECK_STR(ggml_backend_buft_name(cpu), "CPU");
    CHECK(ggml_backend_dev_buffer_type(ggml_backend_dev_get(2)) == cpu);
    CHECK_STR(ggml_backend_buft_name(ggml_backend_dev_buffer_type(ggml_backend_dev_get(0))),
              "VGPU0");
    CHECK_STR(ggml_backend_buft_name(ggml_backend_dev_buffer_type(ggml_backend_dev_get(1))),
              "VGPU1");
    CHECK(ggml_backend_dev_buffer_type(ggml_backend_dev_get(0)) != cpu);
    /* ggml_backend_load_all: a no-op, nothing is added. */
    ggml_backend_load_all();
    CHECK_INT(ggml_backend_dev_count(), 3);
}

TEST(invalid_arguments) {
    int not_a_device = 0;
    ggml_backend_dev_t foreign = (ggml_backend_dev_t)(void *)&not_a_device;
    size_t free = 7, total = 7;
    struct ggml_backend_dev_props props;

    logcap_install();
    CHECK_NULL(ggml_backend_dev_get(3));
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("ggml_backend_dev_get"));

    logcap_clear();
    CHECK_NULL(ggml_backend_dev_get(SIZE_MAX));
    CHECK_NULL(ggml_backend_dev_name(NULL));
    CHECK_NULL(ggml_backend_dev_name(foreign));
    CHECK_NULL(ggml_backend_dev_description(NULL));
    CHECK_NULL(ggml_backend_dev_by_name(NULL));
    CHECK_NULL(ggml_backend_dev_buffer_type(foreign));
    CHECK_NULL(ggml_backend_buft_name(NULL));
    CHECK_NULL(ggml_backend_buft_name((ggml_backend_buffer_type_t)(void *)&not_a_device));
    CHECK_NULL(ggml_backend_dev_by_type((enum ggml_backend_dev_type)42));
    CHECK_INT(ggml_backend_dev_type(NULL), GGML_BACKEND_DEVICE_TYPE_CPU);
    CHECK_INT(logcap_lines, 10);
    CHECK(logcap_contains("ggml_backend_dev_name"));
    CHECK(logcap_contains("ggml_backend_buft_name"));

    logcap_clear();
    ggml_backend_dev_memory(NULL, &free, &total);
    CHECK_INT(free, 0);
    CHECK_INT(total, 0);
    ggml_backend_dev_memory(ggml_backend_dev_get(0), NULL, &total);
    CHECK(total == 24 * GIB);
    CHECK_INT(logcap_lines, 2);
    CHECK(logcap_contains("ggml_backend_dev_memory"));

    logcap_clear();
    memset(&props, 0xAB, sizeof props);
    ggml_backend_dev_get_props(foreign, &props);
    CHECK_NULL(props.name);
    CHECK(props.memory_total == 0);
    ggml_backend_dev_get_props(ggml_backend_dev_get(0), NULL);
    CHECK_INT(logcap_lines, 2);
    CHECK(logcap_contains("ggml_backend_dev_get_props"));
    CHECK(logcap_user_data_ok);
    llama_log_set(NULL, NULL);
}

int main(void) {
    /* Before any library call: the registry reads the variable once. */
    setenv("LLAMA_VIRTUAL_GPUS", "24GiB,8GiB", 1);
    RUN(device_list);
    RUN(device_memory);
    RUN(device_props);
    RUN(device_lookup);
    RUN(buffer_types);
    RUN(invalid_arguments);
    return harness_finish();
}

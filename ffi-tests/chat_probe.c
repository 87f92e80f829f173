/*
 * Differential probe for the chat templates (scripts/test-chat.sh): compiled against
 * UPSTREAM's llama.h, run once with upstream's libllama.so and once with ours; the two
 * outputs must be identical.
 *
 *   chat_probe [TEMPLATE_FILE...]
 *
 * Templates: every built-in name the library lists, NULL (chatml), a few inline strings
 * (detection branches, unknown strings), and each file's whole content as a raw template.
 * Each is applied to every conversation below with add_ass 0 and 1: the length query
 * (NULL buffer), the full output, and a too-small buffer (strncpy semantics: no NUL, and
 * zero padding when the buffer is larger than the text), printed byte for byte.
 * Only inputs whose results upstream defines (no NULL strings) belong here.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

typedef struct llama_chat_message msg;

static const msg conv_upstream[] = {
    {"system", "You are a helpful assistant"}, {"user", "Hello"},
    {"assistant", "Hi there"},                 {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},  {"user", "Another question"},
};
static const msg conv_single[] = {{"user", "Hi"}};
static const msg conv_multi[] = {
    {"user", "one"}, {"assistant", "two"}, {"user", "three"}, {"assistant", "four"}};
static const msg conv_empty_strings[] = {
    {"system", ""}, {"user", ""}, {"assistant", ""}, {"", ""}, {"user", "x"}};
static const msg conv_unicode[] = {
    {"system", "\t\v\f\r\n sys \xc2\xa0\n"},
    {"user", "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82\n\n"},
    {"assistant", " \xe2\x80\x83" "answer\xe2\x80\x83 "},
    {"user", "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d"},
};
static const msg conv_roles[] = {
    {"system", "sys"},
    {"user", "What is the weather?"},
    {"assistant_tool_call", "[{\"name\": \"get_weather\"}]"},
    {"tool", "{\"temperature\": 72}"},
    {"tool_response", "{\"t\": 1}"},
    {"function", "f()"},
    {"model", "m"},
    {"User", "u"},
    {"ASSISTANT", "A"},
    {"\xe3\x83\xa6\xe3\x83\xbc\xe3\x82\xb6\xe3\x83\xbc", "jp"},
    {"assistant", " done "},
};
static const msg conv_systems[] = {
    {"user", "first"}, {"system", " S1 "}, {"system", "S2\n"}, {"user", "second"},
    {"assistant", "reply"}, {"system", "late"},
};
static const msg conv_invalid_utf8[] = {
    {"user", "\xff\xfe\x80 bad \xc3"}, {"assistant", "\xed\xa0\x80"}, {"\xff", "r"},
    {"user", "\xc0\xaf"}};
static const msg conv_blank[] = {{"system", "   "}, {"user", " \n "}, {"assistant", "\t"}};
static const msg conv_assistant_first[] = {{"assistant", "greeting"}, {"user", "question"}};
static msg conv_long[2] = {{"system", "s"}, {"user", NULL}};

struct conversation {
    const char *name;
    const msg *chat;
    size_t n;
};

static const struct conversation conversations[] = {
    {"upstream", conv_upstream, N(conv_upstream)},
    {"single", conv_single, N(conv_single)},
    {"none", NULL, 0},
    {"multi", conv_multi, N(conv_multi)},
    {"empty-strings", conv_empty_strings, N(conv_empty_strings)},
    {"unicode", conv_unicode, N(conv_unicode)},
    {"roles", conv_roles, N(conv_roles)},
    {"systems", conv_systems, N(conv_systems)},
    {"invalid-utf8", conv_invalid_utf8, N(conv_invalid_utf8)},
    {"blank", conv_blank, N(conv_blank)},
    {"assistant-first", conv_assistant_first, N(conv_assistant_first)},
    {"long", conv_long, N(conv_long)},
};

/* Inline templates: detection branches (nested ones need several markers) and strings
 * that must not match. */
static const char *inline_templates[] = {
    "",
    "INVALID TEMPLATE",
    "chatml ",
    " chatml",
    "CHATML",
    "llama3\n",
    "dots1",
    "mistral",
    "mistral-v9",
    "xmistral",
    "{% for m in messages %}{{ m.content }}{% endfor %}",
    "<|im_start|><|im_sep|>",
    "<|im_start|>User:<end_of_utterance>",
    "[INST] <<SYS>>",
    "bos_token + '[INST] ' <<SYS>>",
    "[INST] content.strip() bos_token + '[INST]",
    "[INST] [SYSTEM_PROMPT] [AVAILABLE_TOOLS]",
    "{{ ' [INST] ' + system_message }}",
    "{{ \"[INST]\" }}[AVAILABLE_TOOLS]",
    "{{'[INST]'}}[AVAILABLE_TOOLS]",
    "<|assistant|><|user|><|tool_declare|></s>",
    "<|assistant|><|user|></s>",
    "[|system|][|assistant|][|endofturn|][|tool|]",
    "<|start_of_role|><tools>g4_default_system_message",
    "<|start_of_role|><tool_call>",
    "<role>ASSISTANT</role>\"HUMAN\"<think>",
    "<role>ASSISTANT</role>'HUMAN'",
    "<|im_start|>[INST]",
    "[gMASK]<sop>[gMASK]sop",
};

/* Prints bytes as printable ASCII with everything else (and backslash) as \xNN. */
static void print_bytes(const char *p, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            putchar(c);
        } else {
            printf("\\x%02x", c);
        }
    }
    putchar('\n');
}

static void probe(const char *label, const char *tmpl) {
    size_t c;
    int add_ass;
    printf("== %s\n", label);
    for (c = 0; c < N(conversations); c++) {
        const struct conversation *cv = &conversations[c];
        for (add_ass = 0; add_ass <= 1; add_ass++) {
            int total = llama_chat_apply_template(tmpl, cv->chat, cv->n, add_ass, NULL, 0);
            printf("%s add_ass=%d: %d\n", cv->name, add_ass, total);
            if (total < 0) {
                continue;
            }
            {
                /* Room for the text and 8 more bytes: the tail shows the zero padding. */
                size_t cap = (size_t)total + 8;
                char *buf = malloc(cap + 8);
                int r;
                memset(buf, '#', cap + 8);
                r = llama_chat_apply_template(tmpl, cv->chat, cv->n, add_ass, buf, (int)cap);
                printf("  full %d: ", r);
                print_bytes(buf, cap + 8);
                if (total > 1) {
                    int small = total / 2;
                    memset(buf, '#', cap + 8);
                    r = llama_chat_apply_template(tmpl, cv->chat, cv->n, add_ass, buf, small);
                    printf("  small(%d) %d: ", small, r);
                    print_bytes(buf, (size_t)small + 4);
                }
                memset(buf, '#', cap + 8);
                r = llama_chat_apply_template(tmpl, cv->chat, cv->n, add_ass, buf, -5);
                printf("  negative length %d: ", r);
                print_bytes(buf, 4);
                free(buf);
            }
        }
    }
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    char *data;
    long size;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    data = malloc((size_t)size + 1);
    if (fread(data, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    data[size] = '\0';
    fclose(f);
    return data;
}

int main(int argc, char **argv) {
    const char *names[128];
    char long_content[6001];
    Dl_info info;
    int n, i;
    size_t k;

    /* Which library answered goes to stderr (the runner checks it), not into the diff. */
    if (dladdr((void *)(size_t)llama_chat_apply_template, &info) && info.dli_fname) {
        fprintf(stderr, "library: %s\n", info.dli_fname);
    }
    memset(long_content, 'a', sizeof long_content - 1);
    long_content[sizeof long_content - 1] = '\0';
    long_content[3000] = ' ';
    conv_long[1].content = long_content;

    n = llama_chat_builtin_templates(NULL, 0);
    printf("builtin count %d\n", n);
    if (n < 0 || n > (int)N(names)) {
        return 1;
    }
    printf("builtin(names, 3) %d\n", llama_chat_builtin_templates(names, 3));
    n = llama_chat_builtin_templates(names, N(names));
    for (i = 0; i < n; i++) {
        printf("builtin %d %s\n", i, names[i]);
    }
    for (i = 0; i < n; i++) {
        char label[160];
        snprintf(label, sizeof label, "builtin %s", names[i]);
        probe(label, names[i]);
    }
    probe("NULL", NULL);
    for (k = 0; k < N(inline_templates); k++) {
        char label[160];
        snprintf(label, sizeof label, "inline %zu", k);
        probe(label, inline_templates[k]);
    }
    for (i = 1; i < argc; i++) {
        char *tmpl = read_file(argv[i]);
        const char *base = strrchr(argv[i], '/');
        probe(base ? base + 1 : argv[i], tmpl);
        free(tmpl);
    }
    return 0;
}

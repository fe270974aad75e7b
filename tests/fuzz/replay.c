/* Corpus replay for builds without libFuzzer: feeds every file of the given
 * directories (or files) to LLVMFuzzerTestOneInput once. CI runs this over the
 * committed corpus, under ASan+UBSan in the sanitizer build. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint8_t *copy = malloc(n ? n : 1); /* exact-size heap copy so ASan sees overreads */
    if (!copy)
        return -1;
    memcpy(copy, buf, n);
    LLVMFuzzerTestOneInput(copy, n);
    free(copy);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "replay: %s: missing\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            files += run_file(argv[i]) == 0;
            continue;
        }
        DIR *d = opendir(argv[i]);
        for (struct dirent *de; d && (de = readdir(d));) {
            if (de->d_name[0] == '.')
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], de->d_name);
            files += run_file(p) == 0;
        }
        if (d)
            closedir(d);
    }
    printf("1..1\nok 1 - replayed %d inputs\n", files);
    return files > 0 ? 0 : 1;
}

/* The names of the microvm tier's OCI image disks (tiers/qemu/vmprep.h): made from a manifest
 * digest, read back by the prune, and never anything but one path component. */
#include "tap.h"
#include "tiers/qemu/vmprep.h"

#include <errno.h>
#include <string.h>

#define HEX "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

TEST(a_digest_names_a_disk_and_back)
{
    char name[256], digest[256];
    CHECK_EQ_INT(cdn_vm_oci_disk_name("sha256:" HEX, name, sizeof name), 0);
    CHECK_STREQ(name, "oci-sha256-" HEX);
    CHECK_EQ_INT(cdn_vm_oci_disk_digest("oci-sha256-" HEX ".erofs", digest, sizeof digest), 0);
    CHECK_STREQ(digest, "sha256:" HEX);
}

TEST(only_lowercase_algo_and_hex_make_a_name)
{
    static const char *const bad[] = {"sha256:../../etc", "sha256:" HEX "/x", "sha256:",    ":" HEX,      HEX,
                                      "SHA256:" HEX,      "sha-256:" HEX,     "sha256:ABC", "sha256:a:b", ""};
    char name[256];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_EQ_INT(cdn_vm_oci_disk_name(bad[i], name, sizeof name), -EINVAL);
    CHECK_EQ_INT(cdn_vm_oci_disk_name("sha256:" HEX, name, 20), -EINVAL); /* truncated */
}

TEST(other_files_are_not_disks_of_oci_images)
{
    static const char *const bad[] = {"ccc04a8543cf4c25.erofs",
                                      "oci-sha256-" HEX ".erofs.tmp",
                                      "oci-sha256-" HEX ".source",
                                      "oci-sha256-" HEX ".work",
                                      "oci-.erofs",
                                      "oci-sha256.erofs",
                                      "oci-sha256-.erofs",
                                      "oci-sha256-" HEX "-x.erofs",
                                      "oci-sha256-AB.erofs",
                                      "lock"};
    char digest[256];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_EQ_INT(cdn_vm_oci_disk_digest(bad[i], digest, sizeof digest), -EINVAL);
}

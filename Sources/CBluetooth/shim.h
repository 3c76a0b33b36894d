#ifndef NEARBYD_CBLUETOOTH_H
#define NEARBYD_CBLUETOOTH_H

/*
 * libbluetooth (BlueZ 5.66, Debian's libbluetooth-dev) for the raw-HCI backend
 * (Sources/BluetoothHCI). Swift imports the headers' plain constants, structs,
 * functions and static inline functions (hci_filter_set_ptype and friends);
 * what it cannot import is below.
 */

#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>

/*
 * HCIDEVUP and HCIDEVDOWN are _IOW() expressions, which Swift does not import,
 * and ioctl is variadic: bring controller `dev_id` up or down through any HCI
 * socket `ctl` (the kernel's hci_sock_ioctl, which wants CAP_NET_ADMIN for
 * both). Return ioctl's result; errno as ioctl left it.
 */
static inline int nearby_hci_dev_up(int ctl, int dev_id) {
        return ioctl(ctl, HCIDEVUP, dev_id);
}

static inline int nearby_hci_dev_down(int ctl, int dev_id) {
        return ioctl(ctl, HCIDEVDOWN, dev_id);
}

#endif

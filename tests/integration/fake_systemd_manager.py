#!/usr/bin/python3
"""A stand-in for systemd's manager on a private dbus-daemon, for test_systemd_scope.py.

It owns org.freedesktop.systemd1 and answers StartTransientUnit as systemd does for a scope
with Delegate=yes: it makes the unit's cgroup in the cgroup2 hierarchy (below SLICE, a
directory the test made), hands it to the caller's uid, moves the PIDs into it, returns a job
path and then signals JobRemoved. What it does is chosen per call by the first word of MODE_FILE:

  delegate  as above, JobRemoved result "done"
  failed    no cgroup, JobRemoved result "failed"
  refuse    an error reply (org.freedesktop.systemd1.UnitExists)

Every call's arguments are appended to LOG_FILE, one JSON object a line.

usage: fake_systemd_manager.py BUS_ADDRESS SLICE MODE_FILE LOG_FILE
"""

import json
import os
import sys

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

MANAGER = "org.freedesktop.systemd1.Manager"


class Manager(dbus.service.Object):
    def __init__(self, bus, slice_dir, mode_file, log_file):
        super().__init__(bus, "/org/freedesktop/systemd1")
        self.bus = bus
        self.slice_dir = slice_dir
        self.mode_file = mode_file
        self.log_file = log_file
        self.jobs = 0

    @dbus.service.method(MANAGER, in_signature="ssa(sv)a(sa(sv))", out_signature="o",
                         sender_keyword="sender")
    def StartTransientUnit(self, name, mode, properties, aux, sender=None):
        with open(self.mode_file) as f:
            what = f.read().split()[0]
        uid = int(self.bus.get_unix_user(sender))
        props = {str(k): v for k, v in properties}
        with open(self.log_file, "a") as f:
            f.write(json.dumps({
                "name": str(name), "mode": str(mode), "uid": uid, "aux": len(aux),
                "Delegate": bool(props.get("Delegate", False)),
                "PIDs": [int(p) for p in props.get("PIDs", [])],
                "CollectMode": str(props.get("CollectMode", "")),
                "Description": str(props.get("Description", "")),
            }) + "\n")
        if what == "refuse":
            raise dbus.exceptions.DBusException(f"Unit {name} already exists.",
                                                 name="org.freedesktop.systemd1.UnitExists")
        self.jobs += 1
        job = f"/org/freedesktop/systemd1/job/{self.jobs}"
        result = "failed"
        if what == "delegate":
            cg = os.path.join(self.slice_dir, str(name))
            os.mkdir(cg)
            # Delegation to a user, as systemd does it: the directory and the files a
            # delegate writes.
            for entry in ("", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"):
                os.chown(os.path.join(cg, entry), uid, -1)
            for pid in props.get("PIDs", []):
                with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                    f.write(str(int(pid)))
            result = "done"
        # After the reply, as systemd's job ends after StartTransientUnit returned.
        GLib.idle_add(self.JobRemoved, dbus.UInt32(self.jobs), dbus.ObjectPath(job), name, result)
        return dbus.ObjectPath(job)

    @dbus.service.signal(MANAGER, signature="uoss")
    def JobRemoved(self, job_id, job, unit, result):
        return False  # for idle_add: once


def main():
    address, slice_dir, mode_file, log_file = sys.argv[1:]
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)
    name = dbus.service.BusName("org.freedesktop.systemd1", bus)
    Manager(bus, slice_dir, mode_file, log_file)
    print("ready", flush=True)
    _ = name
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()

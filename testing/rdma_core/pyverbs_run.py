#!/usr/bin/python3
"""rdma-core's own test suite (Debian's python3-pyverbs) on one emulated EFA generation.

Usage: pyverbs_run.py TESTS_DIR GENERATION [run_tests.py arguments]

Runs the suite exactly as its run_tests.py does (same loader, same arguments, -v), keeping the
result object so that every skip is checked by test id and reason. Fails on any failure, error
or unexpected success, and on any skip that ALLOWED (what EFA hardware with Debian's libefa
lacks too) does not explain.
"""
import faulthandler
import os
import re
import sys
import unittest
from importlib.machinery import SourceFileLoader

ALL = ('gen1', 'gen2', 'gen3', 'gen4')

# (generations, test id regex, reason regex, why a real EFA skips it as well). The id is
# unittest's (tests.<module>.<Class>.<test>); reasons are those rdma-core's tests print.
ALLOWED = [
    # Other vendors' tests: they look for an mlx5 device or a PCI function to bind to VFIO.
    (ALL, r'', r'^Can not run the test over non MLX5 device$|^Could not open mlx5 context',
     'mlx5-only test'),
    (ALL, r'', r'^PCI device must be passed by the user$', 'mlx5 VFIO test needs a PCI device'),
    # EFA's transports are SRD and UD only: the driver refuses RC, UC, XRC (and so DC) QPs.
    (ALL, r'', r'^Create QP type 2 is not supported$', 'RC QP (IBV_QPT_RC = 2): not on EFA'),
    (ALL, r'', r'^Create (RC|UC) QP (with|without) (extended )?attrs is not supported$',
     'RC/UC QP: not on EFA'),
    (ALL, r'', r'^Create XRCD is not supported$', 'XRC domains: not on EFA'),
    (ALL, r'^tests\.test_(qpex\.QpExTestCase\.test_qp_ex_rc_|shared_pd\.SharedPDTestCase\.test_imported_rc_ex_)',
     r'^Extended QP is not supported on this device$', 'extended RC QP: EFA has no RC'),
    (ALL, r'', r'^Create SRQ is not supported$', 'shared receive queues: not on EFA'),
    # Memory features EFA does not have: ODP, device memory, memory windows, atomics.
    (ALL, r'', r'^ODP is not supported', 'no on-demand paging on EFA'),
    (ALL, r'', r'^Device memory is not supported$', 'no device memory (ibv_alloc_dm) on EFA'),
    (ALL, r'', r'^Reg MR with MW access is not supported$|^Create memory window of type \d+ is not supported$',
     'no memory windows on EFA'),
    (ALL, r'', r'^Create custom mr with additional access flags (16|18) is not supported$',
     'MW_BIND access (16, with REMOTE_WRITE 18): no memory windows on EFA'),
    (ALL, r'', r'^Atomic operations are not supported$', 'no atomics on EFA'),
    # RDMA read arrived with the second generation, RDMA write with the third: the EFA driver
    # refuses the matching MR access on older ones.
    (('gen1',), r'', r'^Create custom mr with additional access flags 4 is not supported$',
     'REMOTE_READ MR: gen1 has no RDMA read'),
    # The test picks its send ops at random, RDMA read among them; libefa refuses an SRD QP
    # with read ops on a device without RDMA read.
    (('gen1',), r'^tests\.test_efadv\.EfaQPExTest\.test_efadv_create_qp_ex$',
     r'^Create SRD QPEx is not supported$', 'random RDMA read op: gen1 has no RDMA read'),
    (('gen1', 'gen2'), r'', r'^Create custom mr with additional access flags 2 is not supported$|'
     r'^Reg MR with access \(3\) is not supported$', 'REMOTE_WRITE MR: no RDMA write before gen3'),
    # Completion features libefa does not implement: timestamps (its create_cq_ex refuses the
    # timestamp wc_flags), ibv_query_rt_values_ex, tag matching, parent domains.
    (ALL, r'^tests\.test_mlx5_timestamp\.', r'^Create Extended CQ is not supported$',
     'completion timestamps: not in libefa'),
    (ALL, r'', r'^Query device real time is not supported$', 'no ibv_query_rt_values_ex in libefa'),
    (ALL, r'^tests\.test_tag_matching\.', r'^Extended CQ is not supported$',
     'tag matching: not on EFA'),
    (ALL, r'', r'^Parent Domain is not supported on this device$',
     'libefa has no ibv_alloc_parent_domain'),
    (ALL, r'^tests\.test_cq\.CQTest\.test_resize_cq$', r'^Resize CQ is not supported$',
     'libefa has no ibv_resize_cq'),
    # Their extended QP sets IBV_QP_INIT_ATTR_CREATE_FLAGS (with no flags) at random; libefa's
    # create_qp_ex accepts only PD and SEND_OPS_FLAGS in comp_mask and answers EOPNOTSUPP
    # before any command reaches the device.
    (ALL, r'^tests\.test_qp\.QPTest\.test_(create_ud_qp_ex_(with|no)_attr|modify_ud_qp|query_ud_qp)$',
     r'^Create UD QP (with|without) extended attrs is not supported$',
     'random CREATE_FLAGS comp_mask: libefa refuses it'),
    # EFA is not an Ethernet device: no netdev (so no rdma_cm, which resolves IP addresses), no
    # RoCE, no raw packet QPs, no flow steering.
    (ALL, r'', r"^Device efa_0 doesn't have net interface$", 'no netdev: rdma_cm needs one'),
    (ALL, r'', r'^Must be run by root on Ethernet link layer$|'
     r'^To Create RAW QP must be done by root on Ethernet link layer$', 'raw Ethernet only'),
    (ALL, r'', r'^Link layer of port=1 is Unspecified , skip RoCE test$', 'RoCE only'),
    (ALL, r'', r"^No supported port is up, can't run traffic$",
     'looks for a RoCE port (UDP source port test)'),
    # The port's GID table has its one entry in use, as on EFA: the bad-index flow has none free.
    (ALL, r'', r'^All gid indices populated, cannot check bad flow$', 'one GID, populated'),
    # The machine, not the device: GPU memory for dma-buf, CUDA, huge pages.
    (ALL, r'', r'^Allocating dmabuf is not supported by /dev/dri/renderD\d+$',
     'dma-buf tests allocate from a GPU render node; none that exports here'),
    (ALL, r'', r'^cuda-python .* must be installed to run CUDA tests$', 'no CUDA'),
    (ALL, r'', r'^There are no huge pages of size 2M allocated$', 'no huge pages configured'),
]


HANG_LIMIT_S = 60


def matches(entries, gen, test_id, reason, used):
    for i, (gens, id_re, reason_re, _) in enumerate(entries):
        if gen in gens and re.search(id_re, test_id) and re.search(reason_re, reason):
            used.add(i)
            return True
    return False


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    tests_dir, gen = os.path.abspath(sys.argv[1]), sys.argv[2]
    if gen not in ALL:
        print(f'unknown generation {gen}', file=sys.stderr)
        return 2
    sys.path.insert(0, tests_dir)
    sys.argv = [os.path.join(tests_dir, 'run_tests.py'), '-v'] + sys.argv[3:]
    from args_parser import parser
    tests = SourceFileLoader('tests', os.path.join(tests_dir, '__init__.py')).load_module()
    parser.parse_args()
    # A generation's whole suite takes seconds; one that blocks (a lost completion event) ends
    # with every thread's traceback, naming the test, instead of an anonymous timeout.
    faulthandler.dump_traceback_later(HANG_LIMIT_S, exit=True)
    prog = unittest.main(module=tests, exit=False)
    faulthandler.cancel_dump_traceback_later()
    r = prog.result
    bad = [f'{kind}: {t.id()}' for kind, lst in (('FAIL', r.failures), ('ERROR', r.errors))
           for t, _ in lst]
    bad += [f'UNEXPECTED SUCCESS: {t.id()}' for t in r.unexpectedSuccesses]
    allowed = 0
    used_allowed = set()
    for t, reason in r.skipped:
        if matches(ALLOWED, gen, t.id(), reason, used_allowed):
            allowed += 1
        else:
            bad.append(f'SKIP not allowlisted: {t.id()}: {reason}')
    passed = r.testsRun - len(r.failures) - len(r.errors) - len(r.skipped)
    for line in bad:
        print(line)
    # Entries this generation did not need: a hint for pruning, not a failure (the suite's
    # tests change with rdma-core's version).
    for i, (gens, _, reason_re, why) in enumerate(ALLOWED):
        if gen in gens and i not in used_allowed:
            print(f'note: ALLOWED entry unused on {gen}: {reason_re} ({why})')
    print(f'{gen}: {passed} passed, {len(r.failures) + len(r.errors)} failed, '
          f'{len(r.skipped)} skipped ({allowed} allowlisted), '
          f'{len(bad)} problems')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())

// What each word processor does, pass by pass (keys of ThcWord.mode, in priority order).
// Pass 0 applies the rules of ThcDecide to the first half of the words directly from the
// slot registers' outputs; pass 1 follows the mode pass 0 recorded in the recirc header.
// key: pass, recirc acc_mode, verdict, used, state, dup_bits, deadline, kind, is_up, peek
(1, ACC_ADD,   _, _, _, _, _, _, _, _): word_add();
(1, ACC_STORE, _, _, _, _, _, _, _, _): word_write();
(1, ACC_READ,  _, _, _, _, _, _, _, _): word_read();
(1, _,         _, _, _, _, _, _, _, _): NoAction();
(0, _, _,       _, _,             _,    _, _,         1, 1): NoAction();
(0, _, V_FRESH, _, _,             _,    _, _,         1, 0): word_write();
(0, _, _,       0, _,             _,    _, _,         1, 0): word_write();
(0, _, V_SAME,  _, ST_SENT_UP,    _,    _, _,         0, _): word_write();
(0, _, V_SAME,  _, ST_FINAL,      _,    _, _,         0, _): word_write();
(0, _, V_SAME,  _, ST_COLLECTING, 0,    _, KIND_DATA, 1, 0): word_add();
(0, _, V_SAME,  _, ST_COLLECTING, 0,    _, KIND_NORM, 1, 0): word_max();
(0, _, V_SAME,  _, ST_COLLECTING, _,    1, _,         1, 0): word_read();
(0, _, V_SAME,  _, ST_FINAL,      _,    _, _,         1, 0): word_read();
(0, _, V_SAME,  _, ST_SENT_UP,    0,    _, _,         1, 0): NoAction();
(0, _, V_SAME,  _, ST_SENT_UP,    _,    _, _,         1, 0): word_read();

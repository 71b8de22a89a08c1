# Drawn by `kvtier report`; redraw from this folder with: gnuplot bandwidth_vs_inflight.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'bandwidth_vs_inflight.svg'
set termoption noenhanced
set title 'Cold read bandwidth against bytes in flight'
set xlabel 'bytes in flight (MiB)'
set ylabel 'GB/s (1e9 bytes/s)'
set grid
set key below
set yrange [0:*]
set logscale x 2
$d0 << EOD
32 2.42642
64 2.13945
128 2.35822
256 2.54429
512 2.02645
EOD
$d1 << EOD
32 2.38904
64 2.33324
128 2.37058
256 2.29583
512 2.14775
EOD
$d2 << EOD
32 2.22517
64 2.25056
128 2.20516
256 2.03106
512 2.14658
EOD
$d3 << EOD
32 2.20962
64 2.2596
128 2.16725
256 2.03385
512 2.09128
EOD
$d4 << EOD
32 2.09833
64 2.14669
128 2.24758
256 2.10208
512 1.95495
EOD
$d5 << EOD
32 1.99605
64 1.92364
128 1.87494
256 2.14239
512 2.03771
EOD
$d6 << EOD
32 1.99637
64 2.39362
128 2.29242
256 2.22759
512 2.36528
EOD
$d7 << EOD
32 2.22104
64 2.38904
128 2.15637
256 2.03481
512 2.23724
EOD
$d8 << EOD
32 2.28251
64 1.85308
128 2.31093
256 2.47918
512 2.25275
EOD
$d9 << EOD
32 2.2596
64 2.16289
128 2.20282
256 2.55836
512 2.25367
EOD
$d10 << EOD
32 2.14175
64 2.1452
128 1.93086
256 2.24783
512 1.94752
EOD
$d11 << EOD
32 2.19943
64 2.0592
128 2.10048
256 2.26436
512 2.07712
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'kvtier: file:///work/bench-tmp, 32.00 MiB chunks', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 2 title 'fio (same depth): file:///work/bench-tmp, 32.00 MiB chunks', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'kvtier: file:///work/bench-tmp, 32.00 MiB chunks', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 2 title 'fio (same depth): file:///work/bench-tmp, 32.00 MiB chunks', \
     $d4 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 1 title 'kvtier: file:///work/bench-tmp, 32.00 MiB chunks', \
     $d5 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 2 title 'fio (same depth): file:///work/bench-tmp, 32.00 MiB chunks', \
     $d6 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 1 title 'kvtier: fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d7 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 2 title 'fio (same depth): fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d8 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 1 title 'kvtier: fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d9 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 2 title 'fio (same depth): fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d10 using 1:2 with linespoints lw 2 pt 7 lc 6 dt 1 title 'kvtier: fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d11 using 1:2 with linespoints lw 2 pt 7 lc 6 dt 2 title 'fio (same depth): fs:///work/bench-tmp, 32.00 MiB chunks'

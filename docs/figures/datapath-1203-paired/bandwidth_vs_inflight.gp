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
32 2.16742
64 1.93826
128 2.2134
256 1.96431
512 2.32939
EOD
$d1 << EOD
32 2.1499
64 2.31438
128 2.50612
256 2.03481
512 2.19494
EOD
$d2 << EOD
32 2.35157
64 2.21883
128 2.46884
256 2.33485
512 2.2918
EOD
$d3 << EOD
32 2.53272
64 2.48582
128 2.50029
256 2.07612
512 2.57833
EOD
$d4 << EOD
32 1.92723
64 1.96334
128 1.91077
256 2.44994
512 2.39593
EOD
$d5 << EOD
32 1.84673
64 1.86033
128 1.85631
256 2.36276
512 2.28484
EOD
$d6 << EOD
32 1.89897
64 2.33822
128 2.2622
256 2.30148
512 2.38475
EOD
$d7 << EOD
32 2.18267
64 2.24191
128 2.30445
256 2.17603
512 2.47436
EOD
$d8 << EOD
32 2.47665
64 2.19739
128 2.09209
256 2.17379
512 2.44426
EOD
$d9 << EOD
32 2.10151
64 2.27395
128 2.14239
256 2.1499
512 2.48726
EOD
$d10 << EOD
32 2.32557
64 2.42198
128 2.29223
256 2.32157
512 2.4258
EOD
$d11 << EOD
32 2.22795
64 2.43785
128 2.21303
256 2.35112
512 2.48582
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'kvtier: file:///work/bench-tmp, 32.00 MiB chunks', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 2 title 'fio (same depth): file:///work/bench-tmp, 32.00 MiB chunks', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'kvtier: file:///work/bench-tmp, 32.00 MiB chunks', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 2 title 'fio (same depth): file:///work/bench-tmp, 32.00 MiB chunks', \
     $d4 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 1 title 'kvtier: fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d5 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 2 title 'fio (same depth): fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d6 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 1 title 'kvtier: fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d7 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 2 title 'fio (same depth): fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d8 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 1 title 'kvtier: fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d9 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 2 title 'fio (same depth): fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d10 using 1:2 with linespoints lw 2 pt 7 lc 6 dt 1 title 'kvtier: fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d11 using 1:2 with linespoints lw 2 pt 7 lc 6 dt 2 title 'fio (same depth): fs:///work/bench-tmp, 32.00 MiB chunks'

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
32 1.94768
64 1.97856
128 2.02044
256 2.351
512 2.2475
EOD
$d1 << EOD
32 1.95605
64 1.98314
128 1.97222
256 2.07712
512 2.24895
EOD
$d2 << EOD
32 1.82391
64 2.19269
128 2.22472
256 2.24603
512 2.114
EOD
$d3 << EOD
32 2.1307
64 2.50174
128 2.51052
256 2.57523
512 2.31688
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'kvtier: file:///work/bench-tmp, 32.00 MiB chunks', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 2 title 'fio (same depth): file:///work/bench-tmp, 32.00 MiB chunks', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'kvtier: fs:///work/bench-tmp, 32.00 MiB chunks', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 2 title 'fio (same depth): fs:///work/bench-tmp, 32.00 MiB chunks'

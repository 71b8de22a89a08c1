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
2 0.726998
8 0.907714
32 1.0851
128 1.06687
256 1.25049
EOD
$d1 << EOD
2 1.73045
8 2.43755
32 1.17413
128 1.16458
256 1.03743
EOD
$d2 << EOD
32 0.477048
64 1.32601
128 1.16485
256 1.18569
512 1.4031
EOD
$d3 << EOD
32 1.20985
64 1.59546
128 1.3536
256 1.19437
512 1.1583
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'kvtier: file:///work/bench-tmp, 2.00 MiB chunks', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 2 title 'fio (same depth): file:///work/bench-tmp, 2.00 MiB chunks', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'kvtier: file:///work/bench-tmp, 32.00 MiB chunks', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 2 title 'fio (same depth): file:///work/bench-tmp, 32.00 MiB chunks'
